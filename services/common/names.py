"""Resource names (AIP-122): one parser for "jobs/{job}", "models/{model}/versions/{version}", ...

Every service parses the names in its requests here, so a malformed name is INVALID_ARGUMENT
naming the field and the expected form everywhere (never NOT_FOUND in one service and
INVALID_ARGUMENT in another), and ids follow one rule.
"""

from __future__ import annotations

import re

from paddleray.services.common.errors import InvalidArgument

# Resource ids: lower-case, starting with a letter and not ending with '-', at most 63
# characters (a DNS label), so they fit Kubernetes labels, Ray Serve names and file names alike.
ID_PATTERN = r"[a-z](?:[a-z0-9-]{0,61}[a-z0-9])?"
_ID = re.compile(ID_PATTERN)
_VARIABLE = re.compile(r"\{([a-z_]+)\}")
# A model version's number, as the last segment of its name and as a v2 model_version.
VERSION_NUMBER_PATTERN = r"[1-9][0-9]{0,17}"
# Serving names (Deployment.serving_name: the model_name v2 clients send, part of Ray Serve
# application names) allow '.' and '_' and a leading digit, as Triton model names do.
SERVING_NAME_PATTERN = r"[a-z0-9][a-z0-9._-]{0,62}"
_SERVING_NAME = re.compile(SERVING_NAME_PATTERN)
_VERSION_NUMBER = re.compile(VERSION_NUMBER_PATTERN)


def check_id(value: str, field: str) -> str:
    """value when it is a valid resource id; INVALID_ARGUMENT naming field otherwise."""
    if not _ID.fullmatch(value):
        raise InvalidArgument(field, "must be 1-63 lower-case letters, digits and '-', starting with a letter and "
                              f"not ending with '-' ({ID_PATTERN})")
    return value


def is_serving_name(value: str) -> bool:
    return _SERVING_NAME.fullmatch(value) is not None


def is_version_number(value: str) -> bool:
    return _VERSION_NUMBER.fullmatch(value) is not None


class ResourceName:
    """A name pattern such as "models/{model}/versions/{version}".

    Each {variable} matches ID_PATTERN unless a pattern is given for it by keyword
    (ResourceName("models/{model}/versions/{version}", version=r"[1-9][0-9]{0,17}")).
    """

    def __init__(self, pattern: str, **variable_patterns: str) -> None:
        self.pattern = pattern
        self.variables = _VARIABLE.findall(pattern)
        unknown = set(variable_patterns) - set(self.variables)
        if unknown:
            raise ValueError(f"{pattern} has no variables {sorted(unknown)}")
        regex = ""
        for literal, variable in zip(_VARIABLE.split(pattern)[::2], [*self.variables, None], strict=True):
            regex += re.escape(literal)
            if variable is not None:
                regex += f"(?P<{variable}>{variable_patterns.get(variable, ID_PATTERN)})"
        self._regex = re.compile(regex)

    def parse(self, name: str, field: str = "name") -> dict[str, str]:
        """The variables of name; INVALID_ARGUMENT naming field when name has another form."""
        match = self._regex.fullmatch(name)
        if match is None:
            raise InvalidArgument(field, f'must look like "{self.pattern}" with ids matching {ID_PATTERN}')
        return match.groupdict()

    def parse_one(self, name: str, field: str = "name") -> str:
        """The single variable of a one-variable pattern ("jobs/{job}" -> the job id)."""
        (value,) = self.parse(name, field).values()
        return value

    def format(self, **ids: str | int) -> str:
        if set(ids) != set(self.variables):
            raise ValueError(f"{self.pattern} needs {self.variables}, got {sorted(ids)}")
        name = self.pattern
        for variable, value in ids.items():
            name = name.replace("{" + variable + "}", str(value))
        return name

    def __repr__(self) -> str:
        return f"ResourceName({self.pattern!r})"


JOB = ResourceName("jobs/{job}")
EXPERIMENT = ResourceName("experiments/{experiment}")
RUN = ResourceName("runs/{run}")
MODEL = ResourceName("models/{model}")
MODEL_VERSION = ResourceName("models/{model}/versions/{version}", version=VERSION_NUMBER_PATTERN)
DEPLOYMENT = ResourceName("deployments/{deployment}")
