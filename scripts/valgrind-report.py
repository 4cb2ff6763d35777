"""Reads valgrind logs and fails on errors or definite leaks in the module.

An error record counts when one of its stack frames is in libdlock (the
module); Redis's own records are listed but do not fail the check.
"""
import glob
import re
import sys

ERROR_START = re.compile(
    r"^(Invalid (read|write|free)|Conditional jump|Use of uninitialised|Mismatched free"
    r"|Syscall param|Source and destination overlap|\d[\d,]* bytes in [\d,]+ blocks are definitely lost)"
)


def records(path):
    record = []
    for line in open(path, errors="replace"):
        text = re.sub(r"^==\d+== ?", "", line.rstrip("\n"))
        if not text.strip():
            if record:
                yield record
            record = []
        else:
            record.append(text)
    if record:
        yield record


def main(directory):
    logs = sorted(glob.glob(f"{directory}/valgrind-*.log"))
    module_errors, other_errors = [], 0
    for path in logs:
        for record in records(path):
            if not ERROR_START.match(record[0]):
                continue
            if any("libdlock" in line or "dlock::" in line for line in record):
                module_errors.append((path, record))
            else:
                other_errors += 1
    print(f"memcheck: {len(logs)} server processes checked, "
          f"{len(module_errors)} error(s) in the module, {other_errors} elsewhere")
    for path, record in module_errors:
        print(f"--- {path}")
        print("\n".join(record[:40]))
    if not logs:
        print("memcheck: no valgrind logs were written", file=sys.stderr)
        return 1
    return 1 if module_errors else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
