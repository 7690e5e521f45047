"""A real S3 API server for tests: moto's server mode (ThreadedMotoServer) on a free port.

It speaks S3's HTTP API as AWS does (signatures, multipart uploads, list-objects-v2), so the
storage code under test talks to it through pyarrow's own S3 client exactly as it would to AWS
S3 or MinIO; only the endpoint differs (AWS_ENDPOINT_URL). Credentials are given the way a
cluster gives them, in the environment: `env` holds them for the processes a test starts, and
SECRET is a value a test can look for in logs and records (it must never be found).
"""

from __future__ import annotations

import secrets
import socket
import uuid
from dataclasses import dataclass, field

ACCESS_KEY = "paddleray-test-access-key"
REGION = "us-east-1"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@dataclass
class S3Server:
    endpoint: str
    secret: str = field(default_factory=lambda: "s3cret-" + secrets.token_hex(12))

    @property
    def env(self) -> dict[str, str]:
        """What a process needs to reach the server (the AWS SDK's standard variables)."""
        return {"AWS_ACCESS_KEY_ID": ACCESS_KEY, "AWS_SECRET_ACCESS_KEY": self.secret,
                "AWS_ENDPOINT_URL": self.endpoint, "AWS_DEFAULT_REGION": REGION, "AWS_REGION": REGION,
                "AWS_EC2_METADATA_DISABLED": "true"}

    def client(self):
        import boto3

        return boto3.client("s3", endpoint_url=self.endpoint, aws_access_key_id=ACCESS_KEY,
                            aws_secret_access_key=self.secret, region_name=REGION)

    def new_bucket(self, prefix: str = "paddleray") -> str:
        """A fresh bucket; returns its name."""
        name = f"{prefix}-{uuid.uuid4().hex[:12]}"
        self.client().create_bucket(Bucket=name)
        return name

    def keys(self, bucket: str, prefix: str = "") -> list[str]:
        paginator = self.client().get_paginator("list_objects_v2")
        return sorted(o["Key"] for page in paginator.paginate(Bucket=bucket, Prefix=prefix)
                      for o in page.get("Contents", []))


def start_server():
    """(server, S3Server) of a ThreadedMotoServer on a free port; call server.stop() after."""
    from moto.server import ThreadedMotoServer

    port = _free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    return server, S3Server(f"http://127.0.0.1:{port}")
