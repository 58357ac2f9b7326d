"""A small Confluent Schema Registry client: the latest schema of a subject, and a schema
by id. Failures become `ExternalSystemError`s naming the registry and the subject."""

from __future__ import annotations

import base64
import json
import urllib.error
import urllib.parse
import urllib.request

from sluice.errors import ExternalSystemError

TIMEOUT_SECONDS = 10


class SchemaRegistry:
    def __init__(self, url: str, username: str | None = None, password: str | None = None):
        self.url = url.rstrip("/")
        self.auth = None
        if username is not None:
            token = base64.b64encode(f"{username}:{password or ''}".encode()).decode()
            self.auth = f"Basic {token}"

    def latest(self, subject: str) -> tuple[int, str]:
        """(schema id, schema JSON text) of the subject's latest version."""
        quoted = urllib.parse.quote(subject, safe="")
        data = self._get(f"/subjects/{quoted}/versions/latest", f"subject '{subject}'")
        schema_id = data.get("id")
        if type(schema_id) is not int:  # bool is an int to isinstance
            raise ExternalSystemError(
                f"schema registry {self.url} sent no schema id for subject '{subject}'"
            )
        return schema_id, data["schema"]

    def by_id(self, schema_id: int) -> str:
        return self._get(f"/schemas/ids/{schema_id}", f"schema id {schema_id}")["schema"]

    def _get(self, path: str, what: str) -> dict:
        request = urllib.request.Request(
            self.url + path, headers={"Accept": "application/vnd.schemaregistry.v1+json"}
        )
        if self.auth:
            request.add_header("Authorization", self.auth)
        try:
            with urllib.request.urlopen(request, timeout=TIMEOUT_SECONDS) as response:
                data = json.loads(response.read())
        except urllib.error.HTTPError as e:
            if e.code == 404:
                raise ExternalSystemError(
                    f"{what} not found in schema registry {self.url}"
                ) from None
            raise ExternalSystemError(
                f"schema registry {self.url} answered {e.code} for {what}"
            ) from None
        except (urllib.error.URLError, OSError) as e:
            reason = getattr(e, "reason", e)
            raise ExternalSystemError(
                f"cannot reach schema registry {self.url}: {reason}"
            ) from None
        except ValueError:
            raise ExternalSystemError(
                f"schema registry {self.url} sent invalid JSON for {what}"
            ) from None
        if not isinstance(data, dict) or not isinstance(data.get("schema"), str):
            raise ExternalSystemError(f"schema registry {self.url} sent no schema for {what}")
        return data
