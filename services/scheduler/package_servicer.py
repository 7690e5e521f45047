"""PackageService: translates requests to PackageStore calls and results back.

UploadPackage passes the call's caller (identity.of_call()) to the store, which refuses
read-only credentials; packages are content-addressed and shared, so GetPackage needs none.
"""

from __future__ import annotations

from paddleray.scheduler.v1 import package_service_pb2 as pb
from paddleray.scheduler.v1 import package_service_pb2_grpc
from paddleray.services.common.identity import of_call
from paddleray.services.common.server import ServiceRegistration
from paddleray.services.scheduler.packages import PackageStore


class PackageServicer(package_service_pb2_grpc.PackageServiceServicer):
    def __init__(self, store: PackageStore) -> None:
        self._store = store

    async def GetPackage(self, request: pb.GetPackageRequest, context) -> pb.GetPackageResponse:
        return pb.GetPackageResponse(package=await self._store.get(request.name))

    async def UploadPackage(self, request_iterator, context) -> pb.UploadPackageResponse:
        return pb.UploadPackageResponse(package=await self._store.upload(request_iterator, caller=of_call()))


def registration(store: PackageStore) -> ServiceRegistration:
    return ServiceRegistration(
        pb.DESCRIPTOR.services_by_name["PackageService"].full_name,
        PackageServicer(store),
        package_service_pb2_grpc.add_PackageServiceServicer_to_server,
    )
