"""deploy/README.md's walk from an empty cluster to a served model uses calls that exist.

Nothing is applied here, so the walk-through's commands are checked against what they call:
every grpcurl body parses (strictly: no unknown field) as the request message of the RPC it
names, in the real protos; every `paddleray` command line parses with the real CLI (its
commands, options and option types); every file the commands apply or name is in the repo.
"""

from __future__ import annotations

import re
import shlex

import pytest
import typer.main
from google.protobuf import descriptor_pool, json_format, message_factory

import paddleray.exporter.v1.exporter_service_pb2  # noqa: F401 - registers the services below
import paddleray.inference.v2.grpc_service_pb2  # noqa: F401
import paddleray.scheduler.v1.job_service_pb2  # noqa: F401
from paddleray.services.cli.main import app
from support.deploy import DEPLOY, REPO

pytestmark = pytest.mark.unit

README = DEPLOY / "README.md"
METHOD = re.compile(r"^[a-z][\w.]*\.[A-Z]\w*/[A-Z]\w*$")


def _commands() -> list[list[str]]:
    """The command lines of the README's bash blocks, continuations joined, comments dropped."""
    blocks = re.findall(r"```bash\n(.*?)```", README.read_text(), flags=re.S)
    assert blocks
    commands = []
    for block in blocks:
        pending = ""
        for line in block.replace("\\\n", " ").splitlines():
            # A quoted JSON body may span lines: a command ends where its quotes are closed.
            pending += line + "\n"
            try:
                words = shlex.split(pending, comments=True)
            except ValueError:
                continue
            pending = ""
            if words:
                commands.append(words)
        assert not pending, f"unclosed quote in {README.name}: {pending}"
    return commands


def _grpcurls() -> list[list[str]]:
    return [c for c in _commands() if c[0] == "grpcurl"]


def _walkthrough_methods() -> set[str]:
    return {next(w for w in c if METHOD.match(w)) for c in _grpcurls()}


def test_the_walkthrough_trains_exports_deploys_and_infers():
    assert {
        "paddleray.scheduler.v1.JobService/CreateJob",
        "paddleray.exporter.v1.ExporterService/ExportModel",
        "paddleray.exporter.v1.ExporterService/CreateDeployment",
        "inference.GRPCInferenceService/ModelReady",
    } <= _walkthrough_methods()
    cli = {tuple(c[1:3]) for c in _commands() if c[0] == "paddleray"}
    assert {("jobs", "submit"), ("models", "export"), ("deployments", "create")} <= cli
    assert any(c[:2] == ["paddleray", "predict"] for c in _commands())


@pytest.mark.parametrize("command", _grpcurls(), ids=lambda c: next(w for w in c if METHOD.match(w)))
def test_grpcurl_bodies_are_the_rpcs_request_messages(command):
    method_path = next(w for w in command if METHOD.match(w))
    service_name, method_name = method_path.split("/")
    service = descriptor_pool.Default().FindServiceByName(service_name)
    method = service.methods_by_name.get(method_name)
    assert method is not None, f"{service_name} has no {method_name}"
    body = command[command.index("-d") + 1]
    request = message_factory.GetMessageClass(method.input_type)()
    # Raises on a field the message does not have, or a value of the wrong type.
    json_format.Parse(body, request)
    if "-proto" in command:
        root = REPO / command[command.index("-import-path") + 1]
        assert (root / command[command.index("-proto") + 1]).is_file()


def _parse(command, args: list[str]) -> None:
    """What click does before running a command: resolve subcommands, parse and convert options.
    (Typer carries a click of its own, so groups are told apart by what they can do.)"""
    context = command.make_context("paddleray", list(args))
    while hasattr(command, "resolve_command"):
        rest = [*context._protected_args, *context.args]  # noqa: SLF001 - click keeps the subcommand there
        name, command, rest = command.resolve_command(context, rest)
        context = command.make_context(name, rest, parent=context)


@pytest.mark.parametrize("command", [c for c in _commands() if c[0] == "paddleray"], ids=" ".join)
def test_cli_commands_parse_with_the_real_cli(command):
    _parse(typer.main.get_command(app), command[1:])


def test_the_cli_check_catches_a_wrong_option():
    with pytest.raises(Exception, match="No such option: --num-gpus"):
        _parse(typer.main.get_command(app), ["deployments", "create", "digits", "--model", "digits", "--num-gpus", "1"])


def test_files_the_walkthrough_applies_exist():
    for command in _commands():
        if command[:2] == ["kubectl", "apply"]:
            for path in (command[i + 1] for i, word in enumerate(command) if word == "-f"):
                assert (REPO / path).is_file(), path
