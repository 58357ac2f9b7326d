"""A connection's session variables, as Materialize has them: their defaults, which it
reports in ParameterStatus (Materialize's notify set, less its clusters), and what SET may
change — only to values sluice honours, since one Spark session and one catalog serve
every connection (a time zone or a database of a connection's own would be a lie).

The error texts are Materialize's (`unrecognized configuration parameter`, `parameter
… cannot be changed`, `invalid value for parameter …`).
"""

from __future__ import annotations

from sluice.errors import CantChangeRuntimeParam, InvalidParameterValue, UndefinedObject

# PostgreSQL 9.5.0, as Materialize claims to be: too new and some clients warn, too old
# and they fall back to legacy code paths.
SERVER_VERSION = "9.5.0"
DEFAULT_DATABASE = "materialize"


# name (lower case) → (the name clients are told, default value)
VARIABLES: dict[str, tuple[str, str]] = {
    "application_name": ("application_name", ""),
    "client_encoding": ("client_encoding", "UTF8"),
    "client_min_messages": ("client_min_messages", "notice"),
    "database": ("database", DEFAULT_DATABASE),
    "datestyle": ("DateStyle", "ISO, MDY"),
    "extra_float_digits": ("extra_float_digits", "3"),
    "integer_datetimes": ("integer_datetimes", "on"),
    "intervalstyle": ("IntervalStyle", "postgres"),
    "search_path": ("search_path", "public"),
    "server_version": ("server_version", SERVER_VERSION),
    "server_version_num": ("server_version_num", "90500"),
    "standard_conforming_strings": ("standard_conforming_strings", "on"),
    "timezone": ("TimeZone", "UTC"),
    "transaction_isolation": ("transaction_isolation", "strict serializable"),
}
NOTIFIED = (
    "application_name", "client_encoding", "datestyle", "integer_datetimes", "server_version",
    "standard_conforming_strings", "timezone", "intervalstyle", "database", "search_path",
)
READ_ONLY = {"integer_datetimes", "server_version", "server_version_num"}
# The values sluice honours, where it honours only some (compared in lower case, blanks
# removed).
ACCEPTED = {
    "client_encoding": {"utf8", "utf-8", "unicode"},
    "datestyle": {"iso", "iso,mdy", "mdy,iso"},
    "intervalstyle": {"postgres"},
    "search_path": {"public"},
    "standard_conforming_strings": {"on", "true"},
    "timezone": {"utc", "etc/utc", "z", "gmt", "etc/gmt", "+00:00", "00:00", "0", "zulu", "universal"},
    "transaction_isolation": {"serializable", "strictserializable"},
}


class Settings:
    def __init__(self) -> None:
        self.values = {name: default for name, (_, default) in VARIABLES.items()}

    def set(self, name: str, value: str | None) -> str | None:
        """SET `name` to `value` (None: its default); the name clients are told of it when
        they must hear its new value (ParameterStatus), else None."""
        name = name.lower()
        if name == "all" and value is None:
            changed = [n for n, (_, default) in VARIABLES.items() if self.values[n] != default]
            for n in changed:
                self.values[n] = VARIABLES[n][1]
            return None
        if name not in VARIABLES:
            raise UndefinedObject(f'unrecognized configuration parameter "{name}"')
        shown, default = VARIABLES[name]
        if name in READ_ONLY:
            raise CantChangeRuntimeParam(f'parameter "{name}" cannot be changed')
        value = default if value is None else value
        accepted = ACCEPTED.get(name)
        if accepted is not None and value.lower().replace(" ", "") not in accepted:
            raise InvalidParameterValue(f'invalid value for parameter "{shown}": "{value}"')
        if name == "extra_float_digits" and not value.lstrip("-").isdigit():
            raise InvalidParameterValue(f'invalid value for parameter "{shown}": "{value}"')
        self.values[name] = value
        return shown if name in NOTIFIED else None

    def show(self, name: str) -> tuple[str, str]:
        """(column name, value) of SHOW `name`."""
        name = name.lower()
        if name not in VARIABLES:
            raise UndefinedObject(f'unrecognized configuration parameter "{name}"')
        return name, self.values[name]

    def notified(self) -> list[tuple[str, str]]:
        return [(VARIABLES[n][0], self.values[n]) for n in NOTIFIED]
