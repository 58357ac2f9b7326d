"""A Confluent Schema Registry speaking the real REST API over loopback HTTP, for tests.

Serves `GET /subjects/<subject>/versions/latest` and `GET /schemas/ids/<id>` from a dict
of subjects given at start; sluice's client talks to it exactly as to the real service.
Setting `failing` to an HTTP status (503, 401, …) makes it answer every request with that
status until it is set back to None.
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import unquote


class Registry:
    def __init__(self, subjects: dict[str, object]) -> None:
        self.subjects = {name: (i, json.dumps(schema)) for i, (name, schema) in enumerate(subjects.items(), 1)}
        self.failing: int | None = None
        registry = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 - http.server's naming
                body = registry.answer(self.path) if registry.failing is None else {}
                self.send_response(registry.failing or (200 if body is not None else 404))
                self.send_header("Content-Type", "application/vnd.schemaregistry.v1+json")
                self.end_headers()
                self.wfile.write(json.dumps(body or {"error_code": 40401}).encode())

            def log_message(self, *args) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def answer(self, path: str) -> dict | None:
        parts = [unquote(p) for p in path.strip("/").split("/")]
        if len(parts) == 4 and parts[0] == "subjects" and parts[2:] == ["versions", "latest"]:
            found = self.subjects.get(parts[1])
            return None if found is None else {"id": found[0], "schema": found[1], "version": 1}
        if len(parts) == 3 and parts[:2] == ["schemas", "ids"]:
            for schema_id, schema in self.subjects.values():
                if str(schema_id) == parts[2]:
                    return {"schema": schema}
        return None

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
