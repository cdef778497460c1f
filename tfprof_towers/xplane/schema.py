"""The XSpace protobuf schema, built in code (``tsl/profiler/protobuf/xplane.proto``).

The schema is that of ``tsl/profiler/protobuf/xplane.proto`` (TensorFlow / XLA TSL,
Apache License 2.0), written out here as a ``FileDescriptorProto`` so that reading a
trace never imports TensorFlow.  The messages live in a *private*
``DescriptorPool``: a process that also imported TensorFlow (which registers the
same file name in the default pool) sees no clash.  :data:`XSpace` & co. serve tests
and tools that build traces, and the reader for the planes' metadata (small); the
events themselves never become protobuf messages (see :mod:`.events`).
"""

from __future__ import annotations

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

_F = descriptor_pb2.FieldDescriptorProto
_INT64, _UINT64, _DOUBLE = _F.TYPE_INT64, _F.TYPE_UINT64, _F.TYPE_DOUBLE
_STRING, _BYTES, _MESSAGE = _F.TYPE_STRING, _F.TYPE_BYTES, _F.TYPE_MESSAGE
_OPT, _REP = _F.LABEL_OPTIONAL, _F.LABEL_REPEATED

_PACKAGE = "tfprof_towers.xplane"

# (name, number, type, label, message type or None, oneof index or None)
_Field = tuple[str, int, int, int, "str | None", "int | None"]


def _stat_fields() -> list[_Field]:
    return [
        ("metadata_id", 1, _INT64, _OPT, None, None),
        ("double_value", 2, _DOUBLE, _OPT, None, 0),
        ("uint64_value", 3, _UINT64, _OPT, None, 0),
        ("int64_value", 4, _INT64, _OPT, None, 0),
        ("str_value", 5, _STRING, _OPT, None, 0),
        ("bytes_value", 6, _BYTES, _OPT, None, 0),
        ("ref_value", 7, _UINT64, _OPT, None, 0),
    ]


def _messages() -> dict[str, tuple[list[_Field], list[str]]]:
    """Message name -> (fields, oneof names)."""
    p = f".{_PACKAGE}."
    events: _Field = ("events", 4, _MESSAGE, _REP, p + "XEvent", None)
    return {
        "XSpace": (
            [
                ("planes", 1, _MESSAGE, _REP, p + "XPlane", None),
                ("errors", 2, _STRING, _REP, None, None),
                ("warnings", 3, _STRING, _REP, None, None),
                ("hostnames", 4, _STRING, _REP, None, None),
            ],
            [],
        ),
        "XPlane": (
            [
                ("id", 1, _INT64, _OPT, None, None),
                ("name", 2, _STRING, _OPT, None, None),
                ("lines", 3, _MESSAGE, _REP, p + "XLine", None),
                ("event_metadata", 4, _MESSAGE, _REP, p + "XPlane.EventMetadataEntry", None),
                ("stat_metadata", 5, _MESSAGE, _REP, p + "XPlane.StatMetadataEntry", None),
                ("stats", 6, _MESSAGE, _REP, p + "XStat", None),
            ],
            [],
        ),
        "XLine": (
            [
                ("id", 1, _INT64, _OPT, None, None),
                ("display_id", 10, _INT64, _OPT, None, None),
                ("name", 2, _STRING, _OPT, None, None),
                ("display_name", 11, _STRING, _OPT, None, None),
                ("timestamp_ns", 3, _INT64, _OPT, None, None),
                ("duration_ps", 9, _INT64, _OPT, None, None),
                events,
            ],
            [],
        ),
        "XEvent": (
            [
                ("metadata_id", 1, _INT64, _OPT, None, None),
                ("offset_ps", 2, _INT64, _OPT, None, 0),
                ("num_occurrences", 5, _INT64, _OPT, None, 0),
                ("duration_ps", 3, _INT64, _OPT, None, None),
                ("stats", 4, _MESSAGE, _REP, p + "XStat", None),
            ],
            ["data"],
        ),
        "XStat": (_stat_fields(), ["value"]),
        "XEventMetadata": (
            [
                ("id", 1, _INT64, _OPT, None, None),
                ("name", 2, _STRING, _OPT, None, None),
                ("display_name", 4, _STRING, _OPT, None, None),
                ("metadata", 3, _BYTES, _OPT, None, None),
                ("stats", 5, _MESSAGE, _REP, p + "XStat", None),
                ("child_id", 6, _INT64, _REP, None, None),
            ],
            [],
        ),
        "XStatMetadata": (
            [
                ("id", 1, _INT64, _OPT, None, None),
                ("name", 2, _STRING, _OPT, None, None),
                ("description", 3, _STRING, _OPT, None, None),
            ],
            [],
        ),
    }


def _file_proto() -> descriptor_pb2.FileDescriptorProto:
    fdp = descriptor_pb2.FileDescriptorProto(
        name="tfprof_towers/xplane.proto", package=_PACKAGE, syntax="proto3"
    )
    prefix = f".{fdp.package}."
    for name, (fields, oneofs) in _messages().items():
        msg = fdp.message_type.add(name=name)
        for oneof in oneofs:
            msg.oneof_decl.add(name=oneof)
        for fname, number, ftype, label, type_name, oneof in fields:
            f = msg.field.add(name=fname, number=number, type=ftype, label=label)
            if type_name:
                f.type_name = type_name.replace(f".{_PACKAGE}.", prefix)
            if oneof is not None:
                f.oneof_index = oneof
        if name == "XPlane":
            for entry, value in (
                ("EventMetadataEntry", "XEventMetadata"),
                ("StatMetadataEntry", "XStatMetadata"),
            ):
                nested = msg.nested_type.add(name=entry)
                nested.options.map_entry = True
                nested.field.add(name="key", number=1, type=_INT64, label=_OPT)
                nested.field.add(name="value", number=2, type=_MESSAGE, label=_OPT, type_name=prefix + value)
    return fdp


_POOL = descriptor_pool.DescriptorPool()  # private: never clashes with TensorFlow's registration
_POOL.Add(_file_proto())


def _cls(full_name: str):
    return message_factory.GetMessageClass(_POOL.FindMessageTypeByName(full_name))


XSpace = _cls(f"{_PACKAGE}.XSpace")
XPlane = _cls(f"{_PACKAGE}.XPlane")
XEvent = _cls(f"{_PACKAGE}.XEvent")
XStat = _cls(f"{_PACKAGE}.XStat")
