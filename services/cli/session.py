"""The connection options of one `paddleray` invocation, and the SDK client made from them."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import typer

from paddleray.services.cli.output import exit_for
from paddleray.services.client import Client, ClientError, resolve


@dataclass
class Session:
    address: str | None = None
    exporter_address: str | None = None
    inference_address: str | None = None
    token: str | None = None
    tls_ca: str | None = None
    tls_cert: str | None = None
    tls_key: str | None = None
    tls_server_name: str | None = None
    context: str | None = None
    config_file: Path | None = None
    state_dir: Path | None = None
    timeout: float = 30.0
    _client: Client | None = field(default=None, repr=False)

    def client(self, ctx: typer.Context) -> Client:
        if self._client is None:
            try:
                settings = resolve(
                    address=self.address, exporter_address=self.exporter_address,
                    inference_address=self.inference_address, token=self.token, tls_ca=self.tls_ca, tls_cert=self.tls_cert,
                    tls_key=self.tls_key, tls_server_name=self.tls_server_name, context=self.context,
                    config_file=self.config_file, state_dir=self.state_dir,
                )
                self._client = Client(settings, timeout=self.timeout)
            except ClientError as error:
                raise exit_for(error) from None
            ctx.find_root().call_on_close(self._client.close)
        return self._client


def client(ctx: typer.Context) -> Client:
    """The invocation's client, made on first use from the root's connection options."""
    root = ctx.find_root()
    if not isinstance(root.obj, Session):
        root.obj = Session()
    return root.obj.client(ctx)
