"""Typed CRI errors mapped from gRPC status codes."""

from __future__ import annotations

import grpc


class CRIError(Exception):
    """A failed CRI call; .code is the gRPC status code, .method the RPC name."""

    code: grpc.StatusCode = grpc.StatusCode.UNKNOWN

    def __init__(self, method: str, message: str, code: grpc.StatusCode | None = None) -> None:
        super().__init__(f"{method}: {message}")
        self.method = method
        self.message = message
        if code is not None:
            self.code = code

    @property
    def code_name(self) -> str:
        """The code as Go's codes.Code.String() spells it (NotFound, OK, ...)."""
        if self.code is grpc.StatusCode.OK:
            return "OK"
        return "".join(w.capitalize() for w in self.code.name.split("_"))


class NotFoundError(CRIError):
    code = grpc.StatusCode.NOT_FOUND


class UnavailableError(CRIError):
    code = grpc.StatusCode.UNAVAILABLE


class DeadlineExceededError(CRIError):
    code = grpc.StatusCode.DEADLINE_EXCEEDED


class InvalidArgumentError(CRIError):
    code = grpc.StatusCode.INVALID_ARGUMENT


class UnimplementedError(CRIError):
    code = grpc.StatusCode.UNIMPLEMENTED


class AlreadyExistsError(CRIError):
    code = grpc.StatusCode.ALREADY_EXISTS


_BY_CODE: dict[grpc.StatusCode, type[CRIError]] = {
    grpc.StatusCode.NOT_FOUND: NotFoundError,
    grpc.StatusCode.UNAVAILABLE: UnavailableError,
    grpc.StatusCode.DEADLINE_EXCEEDED: DeadlineExceededError,
    grpc.StatusCode.INVALID_ARGUMENT: InvalidArgumentError,
    grpc.StatusCode.UNIMPLEMENTED: UnimplementedError,
    grpc.StatusCode.ALREADY_EXISTS: AlreadyExistsError,
}


def from_rpc_error(method: str, err: grpc.RpcError) -> CRIError:
    code = err.code() if hasattr(err, "code") else grpc.StatusCode.UNKNOWN
    details = err.details() if hasattr(err, "details") else str(err)
    cls = _BY_CODE.get(code, CRIError)
    return cls(method, details or str(code), code)
