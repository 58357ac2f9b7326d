"""A session in a process of its own, for tests of one-process-per-data-directory
(tests/test_faults_access.py, bench/fault_access.py).

`python access_child.py DATA_DIR` opens a session on DATA_DIR (no Kafka) and prints one
JSON line: `{"opened": pid}`, or `{"code": …, "message": …}` and exit status 3 when the
session is refused. Then it runs each SQL statement read from stdin, answering one JSON
line each (`{"status": …, "rows": …}` or the error), until stdin ends.
"""

import json
import os
import sys

import sluice


def main() -> int:
    try:
        session = sluice.Session(sys.argv[1], check_kafka=False)
    except sluice.SqlError as e:
        print(json.dumps({"code": e.code, "message": e.message}), flush=True)
        return 3
    print(json.dumps({"opened": os.getpid()}), flush=True)
    with session:
        for line in sys.stdin:
            try:
                result = session.execute(line)
                answer = {"status": result.status, "rows": [list(r) for r in result.rows]}
            except sluice.SqlError as e:
                answer = {"code": e.code, "message": e.message}
            print(json.dumps(answer), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
