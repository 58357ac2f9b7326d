"""A small Confluent Schema Registry client: the latest schema of a subject, a schema
by id, registering a schema under a subject, and validating a connection (listing the
subjects, as Materialize does). Failures become `ExternalSystemError`s
naming the registry and the subject; `ExternalSystemUnavailable` for those that may clear
by themselves (unreachable, timed out, 408, 429, 5xx), which a read's look-up of a writer
schema retries under its source's `RetryPolicy`."""

from __future__ import annotations

import base64
import json
import socket
import urllib.error
import urllib.parse
import urllib.request

from sluice.errors import ExternalSystemError, ExternalSystemUnavailable
from sluice.kafka.retry import RetryPolicy, SourceUnavailable, TransientFault

TIMEOUT_SECONDS = 10
# HTTP answers that say "not now" rather than "no".
_TRANSIENT_STATUS = frozenset({408, 429})


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
        what = f"subject '{subject}'"
        data = self._get(f"/subjects/{quoted}/versions/latest", what)
        if data is None:
            raise ExternalSystemError(f"{what} not found in schema registry {self.url}")
        schema_id = data.get("id")
        if type(schema_id) is not int:  # bool is an int to isinstance
            raise ExternalSystemError(f"schema registry {self.url} sent no schema id for {what}")
        return schema_id, data["schema"]

    def register(self, subject: str, schema: str) -> int:
        """The id of Avro `schema` (JSON text) under `subject`, registering it if new."""
        quoted = urllib.parse.quote(subject, safe="")
        what = f"subject '{subject}'"
        data = self._call(f"/subjects/{quoted}/versions", what, body={"schema": schema})
        schema_id = None if data is None else data.get("id")
        if type(schema_id) is not int:
            raise ExternalSystemError(f"schema registry {self.url} sent no schema id for {what}")
        return schema_id

    def by_id(self, schema_id: int, timeout: float = TIMEOUT_SECONDS) -> str | None:
        """The schema with id `schema_id`; None if the registry has no schema of that id."""
        data = self._get(f"/schemas/ids/{schema_id}", f"schema id {schema_id}", timeout)
        return None if data is None else data["schema"]

    def writer_schema(self, schema_id: int, retry: RetryPolicy) -> str:
        """The schema a message names by id, for a read. An id the registry does not know
        is an `ExternalSystemError` (that message's decode error). Faults that may clear
        are asked again under `retry`; past it, or on any other failure (a refused login),
        no message is at fault and the read fails: `SourceUnavailable`."""

        def attempt(seconds: float) -> str | None:
            try:
                return self.by_id(schema_id, seconds)
            except ExternalSystemUnavailable as e:
                raise TransientFault(e.message) from None

        try:
            text = retry.call(attempt)
        except ExternalSystemError as e:
            raise SourceUnavailable(e.message, retry.source) from None
        if text is None:
            raise ExternalSystemError(f"schema id {schema_id} not found in schema registry {self.url}")
        return text

    def validate(self, timeout: float = TIMEOUT_SECONDS) -> None:
        """Reach the registry as Materialize validates a connection to one — resolve its
        host, then list its subjects — or raise an `ExternalSystemError` in Materialize's
        words (its resolver's, then its registry client's) for why not."""
        try:
            socket.getaddrinfo(urllib.parse.urlsplit(self.url).hostname, None)
        except socket.gaierror as e:
            raise ExternalSystemError(f"failed to lookup address information: {e.strerror}") from None
        try:
            with urllib.request.urlopen(self._request("/subjects"), timeout=timeout) as response:
                json.loads(response.read())
        except urllib.error.HTTPError as e:
            raise ExternalSystemError(_server_error(e)) from None
        except (urllib.error.URLError, OSError) as e:
            raise ExternalSystemError(
                f"transport: error sending request for url ({self.url}/subjects): {_os_reason(e)}"
            ) from None
        except (ValueError, RecursionError):
            raise ExternalSystemError("transport: error decoding response body") from None

    def _request(self, path: str, body: dict | None = None) -> urllib.request.Request:
        """A GET of `path` (a POST of `body`), with the registry's login if it has one."""
        request = urllib.request.Request(
            self.url + path,
            data=None if body is None else json.dumps(body).encode(),
            headers={
                "Accept": "application/vnd.schemaregistry.v1+json",
                "Content-Type": "application/vnd.schemaregistry.v1+json",
            },
        )
        if self.auth:
            request.add_header("Authorization", self.auth)
        return request

    def _get(self, path: str, what: str, timeout: float = TIMEOUT_SECONDS) -> dict | None:
        """The answer's JSON, holding a schema; None when the registry answers 404."""
        data = self._call(path, what, timeout)
        if data is not None and not isinstance(data.get("schema"), str):
            raise ExternalSystemError(f"schema registry {self.url} sent no schema for {what}")
        return data

    def _call(
        self, path: str, what: str, timeout: float = TIMEOUT_SECONDS, body: dict | None = None
    ) -> dict | None:
        """The answer's JSON object to a GET (a POST of `body`); None when the registry
        answers 404."""
        try:
            with urllib.request.urlopen(self._request(path, body), timeout=timeout) as response:
                data = json.loads(response.read())
        except urllib.error.HTTPError as e:
            if e.code == 404:
                return None
            transient = e.code in _TRANSIENT_STATUS or e.code >= 500
            raise (ExternalSystemUnavailable if transient else ExternalSystemError)(
                f"schema registry {self.url} answered {e.code} for {what}"
            ) from None
        except (urllib.error.URLError, OSError) as e:
            reason = getattr(e, "reason", e)
            raise ExternalSystemUnavailable(
                f"cannot reach schema registry {self.url}: {reason}"
            ) from None
        except (ValueError, RecursionError):  # not JSON, or nested past what json can read
            raise ExternalSystemError(
                f"schema registry {self.url} sent invalid JSON for {what}"
            ) from None
        if not isinstance(data, dict):
            raise ExternalSystemError(f"schema registry {self.url} sent no schema for {what}")
        return data


def _server_error(error: urllib.error.HTTPError) -> str:
    """Materialize's registry client's words for an answer that is not a success: the
    registry's error code and message, or the HTTP status when the body holds none."""
    try:
        data = json.loads(error.read())
        return f"server error {int(data['error_code'])}: {data['message']}"
    except (ValueError, TypeError, KeyError, RecursionError, OSError):
        return f"server error {error.code}: unable to decode error details"


def _os_reason(error: OSError) -> str:
    """Why a request got no answer, as Rust prints an I/O error ("Connection refused (os
    error 111)")."""
    reason = getattr(error, "reason", error)
    if isinstance(reason, TimeoutError):
        return "operation timed out"
    if isinstance(reason, OSError) and reason.errno is not None and reason.strerror:
        return f"{reason.strerror} (os error {reason.errno})"
    return str(reason)
