"""`tfprof-towers export`: a trace, logdir or run directory's frames as Parquet or CSV files."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from tfprof_towers.vocab.errors import EXIT_SOME_HOSTS, TowersError


def register(sub: argparse._SubParsersAction) -> None:
    from tfprof_towers.cli import add_command

    p = add_command(sub, "export", run)
    p.add_argument("path", metavar="PATH",
                   help="an *.xplane.pb file, a logdir, a run directory or RUN_DIR/variants/NAME")
    p.add_argument("--run", metavar="NAME", default=None,
                   help="which profile run of a logdir (or variant of a run directory); default: the newest")
    p.add_argument("--dask", metavar="ADDRESS", default=None,
                   help="analyse a logdir's hosts on this Dask cluster (tcp://scheduler:8786) instead of a "
                        "local process pool; the workers need tfprof-towers (not for run directories)")
    p.add_argument("--frames", metavar="NAMES", type=_frame_names, default=None,
                   help="write only these frames (comma-separated; default: all). A profile of many hosts: "
                        "leave out events and memory, the frames of every event (docs/notebook.md)")
    fmt = p.add_mutually_exclusive_group(required=True)
    fmt.add_argument("--parquet", metavar="DIR", type=_folder, help="write DIR/<frame>.parquet (pyarrow)")
    fmt.add_argument("--csv", metavar="DIR", type=_folder, help="write DIR/<frame>.csv")


def _folder(text: str) -> Path:
    if not text.strip():  # Path("") would be the current directory
        raise argparse.ArgumentTypeError(f"{text!r}: an empty folder name; give a folder")
    return Path(text)


def _frame_names(text: str) -> list[str]:
    from tfprof_towers.frames.names import FRAMES

    names = [n.strip() for n in text.split(",") if n.strip()]
    unknown = [n for n in names if n not in FRAMES]
    if unknown or not names:
        raise argparse.ArgumentTypeError(f"{', '.join(unknown) or repr(text)}: not a frame; the frames: "
                                         f"{', '.join(FRAMES)}")
    return names


def run(args: argparse.Namespace) -> int:
    """Write the frames of `tfprof_towers.load(PATH)` as files: one per frame.

    The frames (docs/notebook.md): events, steps, wall, total, idle, links, findings,
    variants, step_times, losses, placement, memory.  Times are seconds; variant, task, device and
    category are ordered categoricals (kept by --parquet; --csv writes plain text).
    For a run directory the numbers are the ones `report` computes.  A logdir's hosts are analysed
    one by one (--dask ADDRESS: on that cluster); the events and memory frames read every host's
    events together.  Never imports TensorFlow.
    """
    from tfprof_towers.commands.progress import HostProgress, err
    from tfprof_towers.frames import load
    from tfprof_towers.frames.export import check_frames_out
    from tfprof_towers.frames.names import FRAMES

    folder, fmt = (args.parquet, "parquet") if args.parquet is not None else (args.csv, "csv")
    # the folder and every file refused before the trace is read
    check_frames_out(folder, args.frames or FRAMES, fmt, [args.path], make=False)
    if args.dask is not None:  # a bad address is refused before anything is read, one host or many
        from tfprof_towers.trace.executors import check_executor

        check_executor(args.dask)
    with HostProgress() as progress:  # names each host that cannot be read, as analyze does
        profile = load(args.path, run=args.run, dask=args.dask, progress=progress)
    for note in profile.notes:  # which run of a logdir was taken; stdout keeps only the files written
        print(f"note: {note}", file=sys.stderr)
    if args.parquet is not None:
        written = profile.to_parquet(args.parquet, args.frames)
    elif args.csv is not None:
        written = profile.to_csv(args.csv, args.frames)
    else:  # argparse requires one
        raise TowersError("export: give --parquet DIR or --csv DIR")
    for path in written:
        print(path)
    failed = profile.failed_hosts
    if failed:
        names = ", ".join(f.name for f in failed)
        err(f"error: {len(failed)} host(s) could not be read ({names}): the files above leave them out")
        return EXIT_SOME_HOSTS
    return 0
