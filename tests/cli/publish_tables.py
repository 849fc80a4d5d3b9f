"""Publishes shard tables (files, e.g. `reshard simulate --emit`'s sources)
into a directory as one version, slot k holding the k-th table, through
libreshard's rs_dir_* calls: a directory a receiver can plan against with
no publisher process and no shard bytes held anywhere (the tables' addresses
point at nothing; only a dry run may use it).
usage: python3 publish_tables.py LIBRESHARD URL MODEL VERSION TABLE..."""
import ctypes
import sys


class Diag(ctypes.Structure):
    _fields_ = [("status", ctypes.c_int), ("msg", ctypes.c_char * 1024)]


def check(st, diag, what):
    if st != 0:
        sys.exit(f"publish_tables: {what}: {diag.msg.decode()}")


def main():
    lib = ctypes.CDLL(sys.argv[1])
    url, model = sys.argv[2].encode(), sys.argv[3].encode()
    version, tables = int(sys.argv[4]), sys.argv[5:]
    diag, d = Diag(), ctypes.c_void_p()
    lib.rs_dir_open.argtypes = [ctypes.c_char_p, ctypes.POINTER(Diag),
                                ctypes.POINTER(ctypes.c_void_p)]
    lib.rs_dir_create_version.argtypes = [ctypes.c_void_p, ctypes.c_char_p,
                                          ctypes.c_int64, ctypes.c_int64,
                                          ctypes.POINTER(Diag)]
    lib.rs_dir_publish.argtypes = [ctypes.c_void_p, ctypes.c_char_p,
                                   ctypes.c_int64, ctypes.c_int64,
                                   ctypes.c_char_p, ctypes.c_size_t,
                                   ctypes.POINTER(Diag)]
    lib.rs_dir_close.argtypes = [ctypes.c_void_p]
    check(lib.rs_dir_open(url, diag, d), diag, "open")
    check(lib.rs_dir_create_version(d, model, version, len(tables), diag),
          diag, "create version")
    for slot, path in enumerate(tables):
        with open(path, "rb") as f:
            text = f.read()
        check(lib.rs_dir_publish(d, model, version, slot, text, len(text),
                                 diag), diag, f"publish slot {slot}")
    lib.rs_dir_close(d)


if __name__ == "__main__":
    main()
