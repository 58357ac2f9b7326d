"""A Confluent Schema Registry speaking the real REST API over loopback HTTP, for tests.

Serves `GET /subjects` (the subjects' names: what validating a connection asks),
`GET /subjects/<subject>/versions/latest` and `GET /schemas/ids/<id>` from a dict
of subjects given at start, and `POST /subjects/<subject>/versions` (registering a schema:
its id, the same one for a schema registered again); sluice's client talks to it exactly as to the real service.
Given a `login` (username, password), it demands HTTP basic authentication as the real
service configured for it does: any other request is answered `401`. It counts the
requests it answered and refused, by kind (`subjects`, `latest`, `by_id`). Setting `failing` to an
HTTP status (503, 401, …) makes it answer every request with that status until it is set
back to None.
"""

from __future__ import annotations

import base64
import json
import threading
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import unquote


class Registry:
    def __init__(self, subjects: dict[str, object], login: tuple[str, str] | None = None) -> None:
        self.subjects = {name: (i, json.dumps(schema)) for i, (name, schema) in enumerate(subjects.items(), 1)}
        self.expected_auth = None
        if login is not None:
            self.expected_auth = "Basic " + base64.b64encode(":".join(login).encode()).decode()
        self.answered: Counter[str] = Counter()
        self.refused: Counter[str] = Counter()
        self.failing: int | None = None
        registry = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 - http.server's naming
                path = self.path.rstrip("/")
                kind = "subjects" if path == "/subjects" else "by_id" if path.startswith("/schemas/ids/") else "latest"
                if registry.expected_auth not in (None, self.headers.get("Authorization")):
                    registry.refused[kind] += 1
                    self.send_response(401)
                    self.send_header("WWW-Authenticate", 'Basic realm="registry"')
                    self.end_headers()
                    self.wfile.write(json.dumps({"error_code": 401, "message": "Unauthorized"}).encode())
                    return
                registry.answered[kind] += 1
                body = registry.answer(self.path) if registry.failing is None else None
                self.send_response(registry.failing or (200 if body is not None else 404))
                self.send_header("Content-Type", "application/vnd.schemaregistry.v1+json")
                self.end_headers()
                self.wfile.write(json.dumps({"error_code": 40401} if body is None else body).encode())

            def do_POST(self) -> None:  # noqa: N802 - http.server's naming
                parts = [unquote(p) for p in self.path.strip("/").split("/")]
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                if len(parts) != 3 or parts[0] != "subjects" or parts[2] != "versions":
                    self.send_response(404)
                    self.end_headers()
                    return
                registry.answered["register"] += 1
                found = registry.subjects.get(parts[1])
                if found is None or found[1] != body["schema"]:
                    ids = [schema_id for schema_id, _ in registry.subjects.values()]
                    found = (max(ids, default=0) + 1, body["schema"])
                    registry.subjects[parts[1]] = found
                self.send_response(200)
                self.send_header("Content-Type", "application/vnd.schemaregistry.v1+json")
                self.end_headers()
                self.wfile.write(json.dumps({"id": found[0]}).encode())

            def log_message(self, *args) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def answer(self, path: str) -> dict | list | None:
        parts = [unquote(p) for p in path.strip("/").split("/")]
        if parts == ["subjects"]:
            return sorted(self.subjects)
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
