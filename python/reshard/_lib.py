"""libreshard through ctypes: finding the library, its prototypes and
mirrors of the public structs the package passes.

The mirrors follow include/reshard/*.h field for field; tests/python/
test_abi.py compares every size and offset with what a C compiler reports
(tests/python/abi_probe.c), so a header change that is not mirrored here
fails the tests instead of corrupting memory. Option structs start with
`size`, which the library checks against its own sizeof; results the
library fills are passed with their sizeof (the _sized calls), so it
writes no more than the mirror holds.

The library is loaded on first use, so `import reshard` (and capture, which
needs no library) works without it. It is the first of: RESHARD_LIB (a
path); the one installed with the package (reshard/lib/libreshard.so, as
the wheel lays it out); in a source tree (python/reshard), the newer of its
build-release/ and build/ trees' libreshard.so; the system's (ldconfig).
"""
import ctypes
import ctypes.util
import os
import threading
from pathlib import Path

from . import errors

RS_MEM_HOST = 0
DIAG_MSG_MAX = 1024

c_int64_p = ctypes.POINTER(ctypes.c_int64)
NOTICE_CB = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_char_p)


class Diag(ctypes.Structure):
    _fields_ = [("status", ctypes.c_int), ("msg", ctypes.c_char * DIAG_MSG_MAX)]


class PublisherParams(ctypes.Structure):
    _fields_ = [
        ("size", ctypes.c_size_t),
        ("directory", ctypes.c_char_p),
        ("model", ctypes.c_char_p),
        ("rank", ctypes.c_int64), ("world", ctypes.c_int64),
        ("backend", ctypes.c_char_p),
        ("session", ctypes.c_char_p),
        ("replica", ctypes.c_int64),
        ("digests", ctypes.c_int),
        ("heartbeat_s", ctypes.c_double),
        ("heartbeat_max_s", ctypes.c_double),
        ("publish_retry_s", ctypes.c_double),
        ("notice", NOTICE_CB),
        ("notice_ctx", ctypes.c_void_p),
        ("staging", ctypes.c_int),
        ("cut_aligned", ctypes.c_int),
        ("cuts", ctypes.c_void_p),
        ("cuts_file", ctypes.c_char_p),
        ("quantize", ctypes.POINTER(ctypes.c_char_p)),
        ("num_quantize", ctypes.c_size_t),
        ("quantize_wanted", ctypes.c_int),
        ("delta_keep", ctypes.c_int64),
    ]


# rs_staging_t
STAGING = {"caller": 0, "in_place": 1, "arena": 2}


class ReceiverParams(ctypes.Structure):
    _fields_ = [
        ("size", ctypes.c_size_t),
        ("directory", ctypes.c_char_p),
        ("model", ctypes.c_char_p),
        ("backend", ctypes.c_char_p),
        ("salt", ctypes.c_uint64),
        ("holder", ctypes.c_char_p),
        ("discover_timeout_s", ctypes.c_double),
        ("stale_s", ctypes.c_double),
        ("lease_ttl_s", ctypes.c_double),
        ("lease_renew_s", ctypes.c_double),
        ("pull_timeout_s", ctypes.c_double),
        ("release_after", ctypes.c_int),
        ("max_segments_per_copy", ctypes.c_int64),
        ("shadow", ctypes.c_int),
        ("timeout_s", ctypes.c_double),
        ("verify_digests", ctypes.c_int),
        ("verify_partial", ctypes.c_int),
        ("require_full_coverage", ctypes.c_int),
        ("coverage_floor", ctypes.c_double),
        ("max_gbps", ctypes.c_double),
        ("install", ctypes.c_void_p),
        ("install_ctx", ctypes.c_void_p),
        ("progress", ctypes.c_void_p),
        ("progress_ctx", ctypes.c_void_p),
        ("progress_chunk_bytes", ctypes.c_uint64),
        ("notice", NOTICE_CB),
        ("notice_ctx", ctypes.c_void_p),
        ("announce_cuts", ctypes.c_int),
        ("announce_as", ctypes.c_char_p),
        ("nic_gbps", ctypes.c_double),
        ("descriptor_ns", ctypes.c_double),
        ("group", ctypes.c_char_p),
        ("group_size", ctypes.c_int64),
        ("group_rank", ctypes.c_int64),
        ("group_timeout_s", ctypes.c_double),
        ("staging_budget", ctypes.c_uint64),
        ("stall_s", ctypes.c_double),
        ("delta", ctypes.c_int),
        ("delta_budget", ctypes.c_uint64),
    ]


class ExecStats(ctypes.Structure):
    _fields_ = [
        ("runs", ctypes.c_uint64), ("prepares", ctypes.c_uint64),
        ("bytes", ctypes.c_uint64), ("descriptors", ctypes.c_uint64),
        ("shards_verified", ctypes.c_uint64),
        ("wire_seconds", ctypes.c_double),
    ]


class ExecStages(ctypes.Structure):
    _fields_ = [
        ("plan_s", ctypes.c_double), ("prepare_s", ctypes.c_double),
        ("descriptors_s", ctypes.c_double), ("wire_s", ctypes.c_double),
        ("replay_s", ctypes.c_double), ("convert_s", ctypes.c_double),
        ("verify_s", ctypes.c_double), ("install_s", ctypes.c_double),
        ("bytes", ctypes.c_uint64), ("descriptors", ctypes.c_uint64),
        ("full_pulls", ctypes.c_uint64), ("converts", ctypes.c_uint64),
        ("fallback", ctypes.c_uint64), ("shards_verified", ctypes.c_uint64),
        ("ok", ctypes.c_int),
        ("failure", ctypes.c_char_p),
        ("run_s", ctypes.c_double),
        ("waves", ctypes.c_uint64), ("threads", ctypes.c_uint64),
        ("staging_bytes", ctypes.c_uint64),
        ("staging_unbounded", ctypes.c_uint64),
        ("staging_rounds", ctypes.c_uint64),
    ]


PULL_FAILURES_MAX = 8  # RS_PULL_FAILURES_MAX


class PullFailure(ctypes.Structure):
    _fields_ = [
        ("publisher", ctypes.c_char * 129),  # RS_DIR_NAME_MAX + 1
        ("slot", ctypes.c_int64),
        ("why", ctypes.c_char * 320),  # RS_PULL_FAILURE_WHY_MAX
    ]


class PullResult(ctypes.Structure):
    _fields_ = [
        ("version", ctypes.c_int64),
        ("replanned", ctypes.c_int),
        ("discover_s", ctypes.c_double), ("plan_s", ctypes.c_double),
        ("connect_s", ctypes.c_double),
        ("exec", ExecStats),
        ("lease_epoch", ctypes.c_uint64),
        ("lease_renewals", ctypes.c_uint64),
        ("lease_renew_errors", ctypes.c_uint64),
        ("release_status", ctypes.c_int),
        ("release_msg", ctypes.c_char * DIAG_MSG_MAX),
        ("stages", ExecStages),
        ("tables_s", ctypes.c_double),
        ("stage_s", ctypes.c_double), ("apply_s", ctypes.c_double),
        ("bytes_installed", ctypes.c_uint64),
        ("sessions", ctypes.c_uint32),
        ("failovers", ctypes.c_uint32),
        ("failover_msg", ctypes.c_char * DIAG_MSG_MAX),
        ("tables_reused", ctypes.c_uint32),
        ("tables_parsed", ctypes.c_uint32),
        ("table_bytes_read", ctypes.c_uint64),
        ("nfailures", ctypes.c_uint32),
        ("failures", PullFailure * PULL_FAILURES_MAX),
        ("delta_runs", ctypes.c_uint64), ("delta_bytes", ctypes.c_uint64),
        ("delta_full_bytes", ctypes.c_uint64),
        ("whole_runs", ctypes.c_uint64), ("whole_bytes", ctypes.c_uint64),
        ("delta_refused", ctypes.c_uint64),
        ("delta_retried", ctypes.c_int),
        ("delta_held_runs", ctypes.c_uint64),
        ("delta_held_bytes", ctypes.c_uint64),
        ("delta_over_budget_runs", ctypes.c_uint64),
        ("delta_over_budget_bytes", ctypes.c_uint64),
        ("delta_no_memory_runs", ctypes.c_uint64),
        ("delta_no_memory_bytes", ctypes.c_uint64),
        ("delta_in_place_runs", ctypes.c_uint64),
        ("delta_in_place_bytes", ctypes.c_uint64),
    ]


class DryRun(ctypes.Structure):
    _fields_ = [
        ("version", ctypes.c_int64),
        ("replanned", ctypes.c_int), ("complete", ctypes.c_int),
        ("bytes", ctypes.c_uint64), ("descriptors", ctypes.c_uint64),
        ("sessions", ctypes.c_size_t),
        ("tables", ctypes.c_size_t), ("shards", ctypes.c_size_t),
        ("discover_s", ctypes.c_double), ("tables_s", ctypes.c_double),
        ("fingerprint_s", ctypes.c_double), ("plan_s", ctypes.c_double),
        ("prepare_s", ctypes.c_double), ("total_s", ctypes.c_double),
        ("tables_reused", ctypes.c_uint32),
        ("tables_parsed", ctypes.c_uint32),
        ("table_bytes_read", ctypes.c_uint64),
        ("param_bytes", ctypes.c_uint64), ("shadow_bytes", ctypes.c_uint64),
        ("staging_bytes", ctypes.c_uint64),
        ("staging_unbounded", ctypes.c_uint64),
        ("staging_rounds", ctypes.c_uint64),
    ]


class ParamInfo(ctypes.Structure):
    _fields_ = [
        ("name", ctypes.c_char_p), ("ndim", ctypes.c_int),
        ("shape", c_int64_p), ("dtype", ctypes.c_int),
        ("nbytes", ctypes.c_uint64),
    ]


# rs_quant_scheme_t
QUANT_SCHEMES = {"fp8_block": 1, "fp8_channel": 2, "fp8_tensor": 3}


class QuantDesc(ctypes.Structure):
    """rs_quant_desc_t: how one copy is quantized (include/reshard/quant.h);
    the arrays and the name are the caller's."""
    _fields_ = [
        ("scheme", ctypes.c_int),
        ("format", ctypes.c_int),
        ("block_ndim", ctypes.c_int),
        ("block", c_int64_p),
        ("scale_param", ctypes.c_char_p),
        ("scale_offset", ctypes.c_int64),
        ("scale_ndim", ctypes.c_int),
        ("scale_shape", c_int64_p),
        ("scale_stride", c_int64_p),
    ]


# The structs test_abi.py checks against the C compiler, by C name.
DIR_NAME_MAX = 128
DIR_GROUP_MAX = 1024
DIR_GROUP_NOTE_MAX = 400


class VersionInfo(ctypes.Structure):
    _fields_ = [("version", ctypes.c_int64), ("state", ctypes.c_int),
                ("slots", ctypes.c_int64), ("published", ctypes.c_int64)]


class DirLeaseInfo(ctypes.Structure):
    _fields_ = [("holder", ctypes.c_char * (DIR_NAME_MAX + 1)),
                ("epoch", ctypes.c_uint64), ("left_s", ctypes.c_double)]


class DirGroupInfo(ctypes.Structure):
    _fields_ = [("size", ctypes.c_int64), ("attempt", ctypes.c_int64),
                ("attempts", ctypes.c_int64), ("decision", ctypes.c_int),
                ("ranks", ctypes.c_char * (DIR_GROUP_MAX + 1)),
                ("note", ctypes.c_char * (DIR_GROUP_NOTE_MAX + 1))]


class ShardDesc(ctypes.Structure):
    """rs_shard_desc_t: one published shard, as rs_sources_shard lends it."""
    _fields_ = [
        ("tensor", ctypes.c_char_p), ("dtype", ctypes.c_int),
        ("elsize", ctypes.c_size_t), ("ndim", ctypes.c_int),
        ("full_shape", c_int64_p), ("session", ctypes.c_char_p),
        ("device_id", ctypes.c_int64), ("addr", ctypes.c_uint64),
        ("offset", c_int64_p), ("shape", c_int64_p),
        ("digest", ctypes.c_char_p),
    ]


MIRRORS = {
    "rs_diag_t": Diag,
    "rs_publisher_params_t": PublisherParams,
    "rs_receiver_params_t": ReceiverParams,
    "rs_exec_stats_t": ExecStats,
    "rs_exec_stages_t": ExecStages,
    "rs_pull_result_t": PullResult,
    "rs_pull_failure_t": PullFailure,
    "rs_dry_run_t": DryRun,
    "rs_param_info_t": ParamInfo,
    "rs_quant_desc_t": QuantDesc,
    "rs_version_info_t": VersionInfo,
    "rs_dir_lease_info_t": DirLeaseInfo,
    "rs_dir_group_info_t": DirGroupInfo,
    "rs_shard_desc_t": ShardDesc,
}

# Enumerators the package spells as numbers, checked by test_abi.py too.
CONSTANTS = {
    "RS_QUANT_FP8_BLOCK": QUANT_SCHEMES["fp8_block"],
    "RS_QUANT_FP8_CHANNEL": QUANT_SCHEMES["fp8_channel"],
    "RS_QUANT_FP8_TENSOR": QUANT_SCHEMES["fp8_tensor"],
    "RS_DTYPE_F32": 1, "RS_DTYPE_BF16": 2, "RS_DTYPE_F16": 3,
    "RS_DTYPE_F8E4M3": 4, "RS_DTYPE_F8E5M2": 5,
    "RS_ERR_CANCELLED": errors.Cancelled.code,
    "RS_DIR_NAME_MAX": DIR_NAME_MAX, "RS_DIR_GROUP_MAX": DIR_GROUP_MAX,
    "RS_DIR_GROUP_NOTE_MAX": DIR_GROUP_NOTE_MAX,
    "RS_VERSION_PENDING": 1, "RS_VERSION_READY": 2, "RS_VERSION_RELEASED": 3,
    "RS_PULL_FAILURES_MAX": PULL_FAILURES_MAX,
    "RS_PULL_FAILURE_WHY_MAX": 320,
}

_vp = ctypes.c_void_p
_st = ctypes.c_int
_diag_p = ctypes.POINTER(Diag)
_PROTOS = {
    "rs_status_str": (ctypes.c_char_p, [_st]),
    "rs_version_string": (ctypes.c_char_p, []),
    "rs_publisher_params_init_sized": (None, [ctypes.POINTER(PublisherParams), ctypes.c_size_t]),
    "rs_publisher_create": (_st, [ctypes.POINTER(PublisherParams), _diag_p, ctypes.POINTER(_vp)]),
    "rs_publisher_destroy": (None, [_vp]),
    "rs_publisher_register": (_st, [_vp, ctypes.c_char_p, ctypes.c_int, ctypes.c_int, c_int64_p,
                                    c_int64_p, c_int64_p, _vp, ctypes.c_int, _diag_p]),
    "rs_publisher_unregister": (_st, [_vp, ctypes.c_char_p, c_int64_p, _diag_p]),
    "rs_publisher_publish": (_st, [_vp, ctypes.c_int64, _diag_p]),
    "rs_publisher_wait_released": (_st, [_vp, ctypes.c_int64, ctypes.c_double, _diag_p]),
    "rs_publisher_alloc": (_st, [_vp, ctypes.c_uint64, _diag_p, ctypes.POINTER(_vp)]),
    "rs_publisher_free": (_st, [_vp, _vp, _diag_p]),
    "rs_publisher_num_served": (ctypes.c_size_t, [_vp]),
    "rs_receiver_params_init_sized": (None, [ctypes.POINTER(ReceiverParams), ctypes.c_size_t]),
    "rs_receiver_create": (_st, [ctypes.POINTER(ReceiverParams), _vp, _diag_p, ctypes.POINTER(_vp)]),
    "rs_receiver_destroy": (None, [_vp]),
    "rs_receiver_announce_cuts": (_st, [_vp, _diag_p]),
    "rs_receiver_bind": (_st, [_vp, ctypes.c_size_t, _vp, ctypes.c_uint64, ctypes.c_int, _diag_p]),
    "rs_receiver_pull_sized": (_st, [_vp, ctypes.c_int64, _diag_p, ctypes.POINTER(PullResult), ctypes.c_size_t]),
    "rs_receiver_stage": (_st, [_vp, ctypes.c_int64, _diag_p, ctypes.POINTER(_vp)]),
    "rs_receiver_apply_sized": (_st, [_vp, _vp, _diag_p, ctypes.POINTER(PullResult), ctypes.c_size_t]),
    "rs_receiver_discard": (None, [_vp, _vp]),
    "rs_staged_version": (ctypes.c_int64, [_vp]),
    "rs_receiver_exec": (_vp, [_vp]),
    "rs_receiver_dry_run_sized": (_st, [_vp, ctypes.c_int64, _diag_p, ctypes.POINTER(DryRun), ctypes.c_size_t]),
    "rs_capture_load_string": (_st, [ctypes.c_char_p, ctypes.c_size_t, ctypes.c_char_p, _diag_p,
                                     ctypes.POINTER(_vp)]),
    "rs_capture_destroy": (None, [_vp]),
    "rs_capture_num_params": (ctypes.c_size_t, [_vp]),
    "rs_capture_param": (None, [_vp, ctypes.c_size_t, ctypes.POINTER(ParamInfo)]),
    "rs_capture_unattributed": (ctypes.c_int64, [_vp]),
    "rs_capture_num_copies": (ctypes.c_size_t, [_vp]),
    "rs_capture_copy_quant": (ctypes.c_int, [_vp, ctypes.c_size_t, ctypes.POINTER(QuantDesc)]),
    "rs_quant_box": (_st, [ctypes.POINTER(QuantDesc), ctypes.c_int, _vp, ctypes.c_int, c_int64_p,
                           c_int64_p, c_int64_p, ctypes.c_char_p, _diag_p, _vp, _vp]),
    "rs_exec_write_stage_json": (_st, [_vp, ctypes.c_double, _vp, _diag_p]),
    "rs_exec_write_coverage_json": (_st, [_vp, _vp, _diag_p]),
    "rs_dir_open": (_st, [ctypes.c_char_p, _diag_p, ctypes.POINTER(_vp)]),
    "rs_dir_release": (_st, [_vp, ctypes.c_char_p, ctypes.c_int64, _diag_p]),
    "rs_dir_close": (None, [_vp]),
    "rs_receiver_cancel": (None, [_vp]),
    "rs_receiver_cancel_clear": (None, [_vp]),
    "rs_publisher_cancel": (None, [_vp]),
    "rs_publisher_cancel_clear": (None, [_vp]),
    "rs_dir_release_as": (_st, [_vp, ctypes.c_char_p, ctypes.c_int64, ctypes.c_char_p, _diag_p]),
    "rs_dir_abandon_as": (_st, [_vp, ctypes.c_char_p, ctypes.c_int64, ctypes.c_char_p, _diag_p,
                                ctypes.POINTER(ctypes.c_size_t)]),
    "rs_dir_abandon": (_st, [_vp, ctypes.c_char_p, ctypes.c_int64, _diag_p,
                             ctypes.POINTER(ctypes.c_size_t)]),
    "rs_dir_list": (_st, [_vp, ctypes.c_char_p, _diag_p, ctypes.POINTER(ctypes.POINTER(VersionInfo)),
                          ctypes.POINTER(ctypes.c_size_t)]),
    "rs_dir_leases": (_st, [_vp, ctypes.c_char_p, ctypes.c_int64, _diag_p,
                            ctypes.POINTER(ctypes.POINTER(DirLeaseInfo)),
                            ctypes.POINTER(ctypes.c_size_t)]),
    "rs_dir_group_mark": (_st, [_vp, ctypes.c_char_p, ctypes.c_int64, ctypes.c_char_p, ctypes.c_int64,
                                ctypes.c_int64, ctypes.c_int64, ctypes.c_int, ctypes.c_char_p, _diag_p,
                                ctypes.POINTER(DirGroupInfo)]),
    "rs_dir_group_abort": (_st, [_vp, ctypes.c_char_p, ctypes.c_int64, ctypes.c_char_p, ctypes.c_int64,
                                 ctypes.c_char_p, _diag_p, ctypes.POINTER(DirGroupInfo)]),
    "rs_dir_group_info": (_st, [_vp, ctypes.c_char_p, ctypes.c_int64, ctypes.c_char_p, ctypes.c_int64,
                                _diag_p, ctypes.POINTER(DirGroupInfo)]),
    "rs_dir_wait_ready": (_st, [_vp, ctypes.c_char_p, ctypes.c_int64, ctypes.c_double, ctypes.c_double,
                                _diag_p, ctypes.POINTER(VersionInfo)]),
    "rs_dir_read": (_st, [_vp, ctypes.c_char_p, ctypes.c_int64, ctypes.c_int64, _diag_p,
                          ctypes.POINTER(_vp), ctypes.POINTER(ctypes.c_size_t)]),
    "rs_sources_create": (_st, [ctypes.POINTER(_vp)]),
    "rs_sources_destroy": (None, [_vp]),
    "rs_sources_load_string": (_st, [_vp, ctypes.c_char_p, ctypes.c_size_t, ctypes.c_char_p, _diag_p]),
    "rs_sources_num_shards": (ctypes.c_size_t, [_vp]),
    "rs_sources_shard": (None, [_vp, ctypes.c_size_t, ctypes.POINTER(ShardDesc)]),
}

_lock = threading.Lock()
_lib = None
_libc = None


def bundled():
    """Where the wheel puts the library: inside the package."""
    return Path(__file__).resolve().parent / "lib" / "libreshard.so"


def _candidates():
    env = os.environ.get("RESHARD_LIB")
    if env:
        return [env]
    if bundled().exists():
        return [str(bundled())]
    root = Path(__file__).resolve().parents[2]
    built = [root / d / "libreshard.so" for d in ("build-release", "build")]
    built = sorted((p for p in built if p.exists()),
                   key=lambda p: p.stat().st_mtime, reverse=True)
    system = ctypes.util.find_library("reshard")
    return [str(p) for p in built] + ([system] if system else [])


def _load():
    tried = _candidates()
    if not tried:
        raise OSError("libreshard.so not found: install the package "
                      "(pip install .), set RESHARD_LIB to its path or build "
                      "the library (make build)")
    try:
        lib = ctypes.CDLL(tried[0])
    except OSError as e:
        raise OSError(f"cannot load libreshard from {tried[0]}: {e}") from None
    for name, (restype, argtypes) in _PROTOS.items():
        fn = getattr(lib, name)
        fn.restype = restype
        fn.argtypes = argtypes
    return lib


def lib():
    """The loaded library (loaded once, on first use)."""
    global _lib
    with _lock:
        if _lib is None:
            _lib = _load()
        return _lib


def libc():
    """The C library, for open_memstream (records are written to FILE *)."""
    global _libc
    with _lock:
        if _libc is None:
            c = ctypes.CDLL(None)
            c.open_memstream.restype = ctypes.c_void_p
            c.open_memstream.argtypes = [ctypes.POINTER(ctypes.c_void_p),
                                         ctypes.POINTER(ctypes.c_size_t)]
            c.fclose.argtypes = [ctypes.c_void_p]
            c.free.argtypes = [ctypes.c_void_p]
            _libc = c
        return _libc


def check(status, diag):
    """Raises the exception of a failed call's status and message."""
    if status != 0:
        msg = diag.msg.decode("utf-8", "replace") if diag is not None else ""
        raise errors.error_for(status, msg or f"status {status}")


def call(name, *args):
    """Calls a fallible function with a fresh diag as its argument before
    the outputs (`args` holds the outputs after the marker DIAG)."""
    diag = Diag()
    full = [diag if a is DIAG else a for a in args]
    check(getattr(lib(), name)(*full), diag)


DIAG = object()


def memstream(write):
    """Runs write(FILE *) against an in-memory stream; returns its text."""
    c = libc()
    buf = ctypes.c_void_p()
    size = ctypes.c_size_t()
    f = c.open_memstream(ctypes.byref(buf), ctypes.byref(size))
    if not f:
        raise MemoryError("open_memstream failed")
    try:
        write(f)
    finally:
        c.fclose(f)
        text = ctypes.string_at(buf, size.value).decode("utf-8") if buf else ""
        c.free(buf)
    return text


def ints(values):
    """A C int64 array of `values` (kept alive by the caller)."""
    values = [int(v) for v in values]
    return (ctypes.c_int64 * max(1, len(values)))(*values)


def enc(s):
    return None if s is None else str(s).encode("utf-8")
