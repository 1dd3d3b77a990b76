"""OpenAI-shaped error responses: `{"error": {"message", "type", "param", "code"}}`.

Why it exists: OpenAI clients turn the status and this body into typed exceptions
(BadRequestError, AuthenticationError, NotFoundError, ...), so every failure the server can
produce, from a handler, from body validation, from routing or from a bug, must leave in this
shape with the right status. Schema errors are 400 (not FastAPI's 422), as in vLLM; only an
unexpected exception is a 500. A message names the problem and is cut to
`MAX_ERROR_MESSAGE_CHARS` (and `param` to `MAX_ERROR_PARAM_CHARS`), so a huge request can
never make a huge error body.
"""

from __future__ import annotations

import logging
from http import HTTPStatus
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

logger = logging.getLogger(__name__)

ERROR_TYPES = {
    HTTPStatus.BAD_REQUEST: "BadRequestError",
    HTTPStatus.UNAUTHORIZED: "AuthenticationError",
    HTTPStatus.NOT_FOUND: "NotFoundError",
    HTTPStatus.METHOD_NOT_ALLOWED: "MethodNotAllowedError",
    HTTPStatus.REQUEST_ENTITY_TOO_LARGE: "RequestTooLargeError",
    HTTPStatus.TOO_MANY_REQUESTS: "RateLimitError",
    HTTPStatus.INTERNAL_SERVER_ERROR: "InternalServerError",
    HTTPStatus.SERVICE_UNAVAILABLE: "ServiceUnavailableError",
}


MAX_ERROR_MESSAGE_CHARS = 2000
"""The longest error message a response carries; longer ones are cut, saying by how much."""

MAX_ERROR_PARAM_CHARS = 200
"""The longest `param` (the field's path in the body) a response carries."""


class APIError(Exception):
    """A failure to report to the client with `status` and `message`."""

    def __init__(
        self, message: str, status: HTTPStatus = HTTPStatus.BAD_REQUEST, param: str | None = None
    ) -> None:
        super().__init__(message)
        self.message = message
        self.status = status
        self.param = param


def error_body(message: str, status: HTTPStatus, param: str | None = None) -> dict[str, Any]:
    """The JSON body of an error response."""
    kind = ERROR_TYPES.get(status, status.phrase.replace(" ", "") + "Error")
    return {
        "error": {
            "message": _cut(message, MAX_ERROR_MESSAGE_CHARS),
            "type": kind,
            "param": None if param is None else _cut(param, MAX_ERROR_PARAM_CHARS),
            "code": int(status),
        }
    }


def _cut(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    return f"{text[:limit]}... ({len(text) - limit} more characters)"


def error_response(
    message: str, status: HTTPStatus = HTTPStatus.BAD_REQUEST, param: str | None = None
) -> JSONResponse:
    """An error response with the OpenAI body."""
    return JSONResponse(error_body(message, status, param), status_code=int(status))


def validation_message(err: RequestValidationError) -> str:
    """One line per schema violation: where in the body, and what was wrong (a rule over
    the whole body names its field in its own message)."""
    lines = []
    for item in err.errors():
        where = ".".join(str(part) for part in item.get("loc", ()) if part != "body")
        message = item.get("msg", "invalid")
        lines.append(message if "field" in item.get("ctx", {}) else f"{where or 'body'}: {message}")
    return "; ".join(dict.fromkeys(lines)) or "invalid request body"


def validation_param(err: RequestValidationError) -> str | None:
    """The field a body-wide rule named, if the first violation is one."""
    errors = err.errors()
    return errors[0].get("ctx", {}).get("field") if errors else None


def install_error_handlers(app: FastAPI) -> None:
    """Route every failure of `app` through `error_body`."""

    @app.exception_handler(APIError)
    async def _api_error(_request: Request, err: APIError) -> JSONResponse:
        return error_response(err.message, err.status, err.param)

    @app.exception_handler(RequestValidationError)
    async def _invalid_body(_request: Request, err: RequestValidationError) -> JSONResponse:
        return error_response(
            validation_message(err), HTTPStatus.BAD_REQUEST, validation_param(err)
        )

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(request: Request, err: StarletteHTTPException) -> JSONResponse:
        status = HTTPStatus(err.status_code)
        message = (
            f"route {request.method} {request.url.path} not found"
            if status == HTTPStatus.NOT_FOUND
            else str(err.detail)
        )
        return error_response(message, status)

    @app.exception_handler(Exception)
    async def _unexpected(_request: Request, err: Exception) -> JSONResponse:
        logger.exception("unexpected server error")
        return error_response(
            f"internal server error: {type(err).__name__}: {err}",
            HTTPStatus.INTERNAL_SERVER_ERROR,
        )
