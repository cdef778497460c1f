"""``--dask ADDRESS`` checked before any Dask client is made (trace/executors.py): every malformed or
unreachable address is one line (a TowersError), at once, with no client left to close at exit."""

from __future__ import annotations

import socket

import pytest

from tfprof_towers.trace import executors
from tfprof_towers.trace.executors import DaskCluster, _connect, check_dask_address
from tfprof_towers.vocab.errors import EXIT_INPUT, TowersError

#: Addresses refused by their form alone, and what the one line says.
BAD = {
    "ucx://127.0.0.1:1": "ucx:// needs UCX support for Dask",
    "garbage": "garbage: no port",
    "http://localhost:8786": "unknown scheme 'http'",
    "": "'': an empty address",
    "   ": "an empty address",
    "inproc://x": "inproc:// names a scheduler inside one Python process",
    "tcp://[::1": "tcp://[::1: not HOST:PORT",
    "tcp://:8786": "not HOST:PORT",
    "tcp://127.0.0.1:0": "port 0 is not in 1-65535",
    "tcp://127.0.0.1:99999": "port 99999 is not in 1-65535",
    "tcp://127.0.0.1:8786/": "not HOST:PORT",
    "tcp://user@host:8786": "not HOST:PORT",
    "tcp://a\nb:1": "tcp://a b:1: not HOST:PORT",
    "file:///etc/passwd": "unknown scheme 'file'",
}


@pytest.fixture
def no_client(monkeypatch: pytest.MonkeyPatch) -> None:
    """Fail the test if a Dask client is made."""
    import distributed

    def made(*args: object, **kwargs: object) -> None:
        raise AssertionError("a Dask client was made for a bad address")

    monkeypatch.setattr(distributed, "Client", type("Client", (), {"__new__": made}))


@pytest.mark.parametrize("address", BAD, ids=repr)
def test_a_malformed_address_is_one_line_before_any_client(address: str, no_client: None) -> None:
    with pytest.raises(TowersError) as exc:
        DaskCluster(address)
    text = str(exc.value)
    assert BAD[address] in text and "\n" not in text and exc.value.exit_code == EXIT_INPUT
    assert text.startswith("--dask ")


def free_port() -> int:
    """A port nothing listens on (bound, then closed)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_an_address_where_nothing_listens_is_refused_without_waiting(no_client: None) -> None:
    port = free_port()
    for address in (f"tcp://127.0.0.1:{port}", f"127.0.0.1:{port}", f"TCP://127.0.0.1:{port}"):
        with pytest.raises(TowersError, match=r"no Dask scheduler answers there \(Connection refused\)"):
            DaskCluster(address)
    with pytest.raises(TowersError, match=r"cannot resolve host 'no-such-host\.invalid'"):
        check_dask_address("tcp://no-such-host.invalid:8786")


def test_good_forms_are_kept() -> None:
    assert check_dask_address("127.0.0.1:8786", probe=False) == "tcp://127.0.0.1:8786"
    assert check_dask_address(" TCP://[::1]:8786 ", probe=False) == "tcp://[::1]:8786"
    assert check_dask_address("tls://scheduler.example:8786", probe=False) == "tls://scheduler.example:8786"


def test_a_client_that_fails_to_start_is_closed_at_once() -> None:
    """A transport's own error (UCX's TypeError) is one line, and the half-made client is stopped: its
    ``__del__`` at exit has nothing left to wait for."""
    stopped = []

    class Runner:
        def stop(self) -> None:
            stopped.append(True)

    class FailingClient:
        status = "newly-created"

        def __init__(self, address: str, **kwargs: object) -> None:
            self._loop_runner = Runner()
            self.status = "connecting"
            raise TypeError("unsupported operand type(s)\nfor +: 'NoneType' and 'str'")

    with pytest.raises(TowersError) as exc:
        _connect(FailingClient, "tcp://127.0.0.1:8786")
    assert str(exc.value) == ("--dask tcp://127.0.0.1:8786: cannot reach a Dask scheduler there "
                              "(unsupported operand type(s) for +: 'NoneType' and 'str')")
    assert stopped == [True]


def test_the_probe_waits_no_longer_than_its_bound(monkeypatch: pytest.MonkeyPatch) -> None:
    seen = {}

    def connect(address: tuple[str, int], timeout: float) -> socket.socket:
        seen["timeout"] = timeout
        raise TimeoutError("timed out")

    monkeypatch.setattr(socket, "create_connection", connect)
    with pytest.raises(TowersError, match="no Dask scheduler answers there"):
        check_dask_address("tcp://10.255.255.1:8786")
    assert seen["timeout"] == executors.PROBE_S


def test_a_listener_that_is_not_a_dask_scheduler_is_refused_after_the_probe(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A TCP server that says nothing on accept (a web server) is refused after :data:`PROBE_S`; one that
    speaks first, as a Dask scheduler sends its handshake, passes the check."""
    import threading

    monkeypatch.setattr(executors, "PROBE_S", 0.2)
    for greeting in (b"", b"\x00"):
        server = socket.create_server(("127.0.0.1", 0))
        port = server.getsockname()[1]

        def serve(server: socket.socket = server, greeting: bytes = greeting) -> None:
            conn, _ = server.accept()
            conn.sendall(greeting)
            conn.recv(1)  # until the client leaves
            conn.close()

        t = threading.Thread(target=serve, daemon=True)
        t.start()
        try:
            if greeting:
                assert check_dask_address(f"tcp://127.0.0.1:{port}") == f"tcp://127.0.0.1:{port}"
            else:
                with pytest.raises(TowersError, match=r"sent no Dask handshake within 0\.2 s; not a Dask"):
                    check_dask_address(f"tcp://127.0.0.1:{port}")
        finally:
            t.join(5)
            server.close()


@pytest.mark.parametrize("command", ["analyze", "export"])
def test_a_bad_address_is_refused_before_a_single_host_trace_is_read(command: str, tmp_path, capsys,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """One host file has no map to spread, but the address the user gave is still checked first."""
    from trace_kit import two_gpu_trace

    from tfprof_towers.cli import main
    from tfprof_towers.frames import profile as frames_profile

    path = two_gpu_trace().write(tmp_path / "h0.xplane.pb")
    monkeypatch.setattr(frames_profile, "load", lambda *a, **k: pytest.fail("the trace was read"))
    extra = ["--parquet", str(tmp_path / "out")] if command == "export" else []
    assert main([command, str(path), *extra, "--dask", "garbage"]) == EXIT_INPUT
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--dask garbage: no port" in err
