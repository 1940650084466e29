"""The HTTP client of `toposched serve` (docs/api.md): one typed method per endpoint over httpx.

Answers are the server's JSON as parsed, typed as TypedDicts so that `--json` prints them
unchanged. Every failure becomes a `ClientError` whose `exit_code` says whose fault it was:
the input (2), the server's refusal (3), or the server being unreachable or failing (4).
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from enum import IntEnum, StrEnum
from typing import TYPE_CHECKING, Any, NotRequired, TypedDict, cast
from urllib.parse import quote

from toposched.cli.connection import Connection
from toposched.cluster.errors import ToposchedError

if TYPE_CHECKING:
    import httpx

# httpx is imported by the first request, so that the client commands' usage and input errors
# answer without it.

REQUEST_TIMEOUT_S = 30.0
CONNECT_TIMEOUT_S = 5.0


class ExitCode(IntEnum):
    """The client commands' exit codes (docs/cli.md)."""

    OK = 0
    BAD_INPUT = 2
    REFUSED = 3
    UNAVAILABLE = 4


class ClientError(ToposchedError):
    """A client command failed; `exit_code` is what the command returns."""

    exit_code: ExitCode = ExitCode.UNAVAILABLE
    context: str = ""
    """What the command was doing, shown before the error (e.g. the file being submitted)."""
    hint: str = ""
    """Shown after the error: what was left undone, or where the setting at fault came from."""

    def __str__(self) -> str:
        text = super().__str__()
        if self.context:
            text = f"{self.context}: {text}"
        return f"{text}; {self.hint}" if self.hint else text


class ServerError(ClientError):
    """The server answered 4xx/5xx with its error document (docs/api.md, Errors)."""

    def __init__(
        self,
        status: int,
        code: str,
        message: str,
        field: str | None = None,
        value: str | None = None,
        rule: str | None = None,
    ) -> None:
        self.status = status
        self.code = code
        self.message = message
        self.field = field
        self.value = value
        self.rule = rule
        self.exit_code = exit_code_for_status(status)
        super().__init__(self.describe())

    def describe(self) -> str:
        """One line: the status, the code, the message, and any of field, value and rule
        that the message does not already name."""
        details = []
        if self.field is not None and self.field not in self.message:
            details.append(f"field {self.field}")
        if self.value is not None and self.value not in self.message:
            details.append(f"value {self.value!r}")
        if self.rule is not None and self.rule not in self.message:
            details.append(f"rule: {self.rule}")
        extra = f" ({'; '.join(details)})" if details else ""
        return f"server answered {self.status} {self.code}: {self.message}{extra}"


class UnreachableError(ClientError):
    """No answer: the connection failed or timed out."""

    exit_code = ExitCode.UNAVAILABLE


class BadAnswerError(ClientError):
    """The server answered 2xx with something that is not what docs/api.md promises."""

    exit_code = ExitCode.UNAVAILABLE


def exit_code_for_status(status: int) -> ExitCode:
    """422 (and the other 4xx about the request itself) -> 2; a refusal -> 3; 5xx -> 4."""
    if status in (401, 403, 404, 409, 413):
        return ExitCode.REFUSED
    if 400 <= status < 500:
        return ExitCode.BAD_INPUT
    return ExitCode.UNAVAILABLE


class JobState(StrEnum):
    PENDING = "pending"
    RUNNING = "running"
    FINISHED = "finished"
    FAILED = "failed"
    CANCELLED = "cancelled"

    @property
    def final(self) -> bool:
        return self in (JobState.FINISHED, JobState.FAILED, JobState.CANCELLED)


class NodeAction(StrEnum):
    DRAIN = "drain"
    CORDON = "cordon"
    UNCORDON = "uncordon"


class Job(TypedDict):
    id: str
    account: str
    priority: int
    state: str
    pods: int
    gpus: float
    submit_time: float
    start_time: float | None
    end_time: float | None
    reason: str
    unallocated: bool
    preemptions: int
    attempts: int
    nodes: list[str]
    spec: dict[str, Any]


class JobPage(TypedDict):
    jobs: list[Job]
    next: str | None


class Position(TypedDict):
    account: int | None
    overall: int | None


class Reservation(TypedDict):
    start_time: float
    domain: str


class HistoryEntry(TypedDict):
    time: float
    event: str


class Explanation(TypedDict):
    id: str
    state: str
    position: Position | None
    sort_key: list[Any]
    reason: str
    code: str | None
    reservation: Reservation | None
    reservation_note: NotRequired[str | None]
    history: list[HistoryEntry]


class QueueEntry(TypedDict):
    position: int
    id: str
    account: str
    priority: int
    gpus: float
    submit_time: float
    sort_key: list[Any]
    reason: str


class Queue(TypedDict):
    queue: list[QueueEntry]


class Node(TypedDict):
    name: str
    labels: dict[str, str]
    health: str
    gpus: int
    free_gpus: float
    gpu_model: str
    jobs: list[str]


class Domain(TypedDict):
    domain: str
    nodes: int
    gpus: int
    free_gpus: float
    healthy_nodes: int


class NodeList(TypedDict):
    nodes: list[Node]
    next: str | None


class DomainList(TypedDict):
    domains: list[Domain]


class AccountRow(TypedDict):
    account: str
    budget_gpus: float | None
    running_gpus: float
    usage_gpu_hours: float
    fair_share: float | None
    pending: int
    running: int
    owed_gpu_hours: float
    delivered_gpu_hours: float
    delivered_within_owed_gpu_hours: float
    owed_met: float | None


class Accounts(TypedDict):
    tree: dict[str, Any]
    accounts: list[AccountRow]
    owed_window_hours: float


class Event(TypedDict):
    id: int
    time: float
    kind: str
    job: str | None
    detail: NotRequired[Any]


@dataclass(frozen=True)
class Submitted:
    """A submission's answer: the job, and whether this request made it (201) or its
    idempotency key named a job submitted before (200)."""

    job: Job
    created: bool


def _required(answer: Any, keys: tuple[str, ...], what: str) -> dict[str, Any]:
    """`answer` if it is an object holding every key in `keys`, else a BadAnswerError."""
    if not isinstance(answer, dict):
        raise BadAnswerError(f"the server's {what} is not a JSON object")
    missing = [key for key in keys if key not in answer]
    if missing:
        raise BadAnswerError(f"the server's {what} lacks {', '.join(missing)}")
    return answer


JOB_KEYS = ("id", "account", "state", "pods", "gpus")


def _job(answer: Any) -> Job:
    return cast(Job, _required(answer, JOB_KEYS, "job"))


def _segment(text: str) -> str:
    """`text` as one path segment: a job id or node name with '/' stays one segment."""
    return quote(text, safe="")


class ApiClient:
    """A connection to one server; use as a context manager so the sockets are closed."""

    def __init__(self, connection: Connection, timeout_s: float = REQUEST_TIMEOUT_S) -> None:
        headers = {"Accept": "application/json", "User-Agent": "toposched-cli"}
        if connection.token:
            headers["Authorization"] = f"Bearer {connection.token}"
        self.connection = connection
        self._headers = headers
        self._timeout_s = timeout_s
        self._opened: httpx.Client | None = None

    @property
    def _http(self) -> httpx.Client:
        """The HTTP connection pool, opened by the first request: a command that refuses its
        arguments first never loads httpx."""
        if self._opened is None:
            import httpx

            timeout = httpx.Timeout(
                self._timeout_s, connect=min(self._timeout_s, CONNECT_TIMEOUT_S)
            )
            self._opened = httpx.Client(
                base_url=self.connection.server, headers=self._headers, timeout=timeout
            )
        return self._opened

    def __enter__(self) -> ApiClient:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close(self) -> None:
        if self._opened is not None:
            self._opened.close()

    # -- jobs --------------------------------------------------------------------------------

    def submit(self, body: bytes, content_type: str, idempotency_key: str) -> Submitted:
        headers = {"Content-Type": content_type, "Idempotency-Key": idempotency_key}
        response = self._request("POST", "/v1/jobs", content=body, headers=headers)
        return Submitted(_job(_parsed(response)), created=response.status_code == 201)

    def jobs(
        self,
        account: str | None = None,
        state: JobState | None = None,
        limit: int | None = None,
        after: str | None = None,
    ) -> JobPage:
        params = _params(account=account, state=state, limit=limit, after=after)
        answer = _required(self._json("GET", "/v1/jobs", params=params), ("jobs",), "job list")
        answer.setdefault("next", None)
        return cast(JobPage, answer)

    def job(self, job_id: str) -> Job:
        return _job(self._json("GET", f"/v1/jobs/{_segment(job_id)}"))

    def cancel(self, job_id: str) -> Job:
        return _job(self._json("DELETE", f"/v1/jobs/{_segment(job_id)}"))

    def set_priority(self, job_id: str, priority: int) -> Job:
        path = f"/v1/jobs/{_segment(job_id)}"
        return _job(self._json("PATCH", path, json={"priority": priority}))

    def explain(self, job_id: str) -> Explanation:
        answer = self._json("GET", f"/v1/jobs/{_segment(job_id)}/explain")
        return cast(Explanation, _required(answer, ("id", "state", "reason"), "explanation"))

    def pod_log(self, job_id: str, rank: int, tail: int | None = None) -> str:
        path = f"/v1/jobs/{_segment(job_id)}/pods/{rank}/log"
        return self._request("GET", path, params=_params(tail=tail)).text

    def queue(self, account: str | None = None) -> Queue:
        answer = self._json("GET", "/v1/queue", params=_params(account=account))
        return cast(Queue, _required(answer, ("queue",), "queue"))

    # -- nodes and accounts ------------------------------------------------------------------

    def nodes(self, limit: int | None = None, after: str | None = None) -> NodeList:
        answer = self._json("GET", "/v1/nodes", params=_params(limit=limit, after=after))
        answer = _required(answer, ("nodes",), "node list")
        answer.setdefault("next", None)
        return cast(NodeList, answer)

    def domains(self, level: str) -> DomainList:
        answer = self._json("GET", "/v1/nodes", params={"level": level})
        return cast(DomainList, _required(answer, ("domains",), "domain list"))

    def node_action(self, name: str, action: NodeAction) -> Node:
        answer = self._json("POST", f"/v1/nodes/{_segment(name)}/{action.value}")
        return cast(Node, _required(answer, ("name", "health"), "node"))

    def accounts(self) -> Accounts:
        return cast(
            Accounts, _required(self._json("GET", "/v1/accounts"), ("accounts",), "accounts")
        )

    def policy(self) -> dict[str, Any]:
        """The scheduler's settings that differ from the defaults (`GET /v1/policy`)."""
        answer = _required(self._json("GET", "/v1/policy"), ("policy",), "policy")
        return dict(answer["policy"])

    # -- events ------------------------------------------------------------------------------

    def events(self, after: int | None, follow: bool) -> Iterator[Event]:
        """The events after `after` in order; with `follow`, new ones as they happen until the
        server closes the stream. Server-sent events: `id:` and `data:` lines, a blank line
        ends an event, lines starting with ':' are comments (keep-alives)."""
        import httpx

        params = _params(after=after, follow=None if follow else "false")
        timeout = httpx.Timeout(REQUEST_TIMEOUT_S, connect=CONNECT_TIMEOUT_S, read=None)
        headers = {"Accept": "text/event-stream"}
        try:
            with self._http.stream(
                "GET", "/v1/events", params=params, headers=headers, timeout=timeout
            ) as response:
                if response.status_code >= 400:
                    response.read()
                    raise self._refusal(response)
                data: list[str] = []
                for line in response.iter_lines():
                    if line == "":
                        if data:
                            yield _event("\n".join(data))
                        data = []
                    elif line.startswith("data:"):
                        data.append(line[5:].removeprefix(" "))
            if data:
                yield _event("\n".join(data))
        except httpx.TransportError as error:
            raise _unreachable(self.connection, error) from None

    # -- plumbing ----------------------------------------------------------------------------

    def _request(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        import httpx

        try:
            response = self._http.request(method, path, **kwargs)
        except httpx.TransportError as error:
            raise _unreachable(self.connection, error) from None
        if response.status_code >= 400:
            raise self._refusal(response)
        return response

    def _refusal(self, response: httpx.Response) -> ServerError:
        """The error for a 4xx/5xx answer; a 401 also says where the token came from."""
        error = _error_from(response)
        if error.status == 401:
            connection = self.connection
            error.hint = (
                f"the token came from {connection.token_source}"
                if connection.token
                else "no token was given: set --token, TOPOSCHED_TOKEN or the config file"
            )
        return error

    def _json(self, method: str, path: str, **kwargs: Any) -> Any:
        return _parsed(self._request(method, path, **kwargs))


def _parsed(response: httpx.Response) -> Any:
    try:
        return response.json()
    except ValueError:
        request = response.request
        raise BadAnswerError(
            f"the server's answer to {request.method} {request.url.path} is not JSON "
            f"(HTTP {response.status_code}, {response.headers.get('content-type', '?')})"
        ) from None


def _params(**values: object) -> dict[str, str]:
    """Query parameters, leaving out those that are None."""
    return {name: str(value) for name, value in values.items() if value is not None}


def _event(data: str) -> Event:
    try:
        parsed = json.loads(data)
    except ValueError:
        raise BadAnswerError(f"an event's data is not JSON: {data[:80]!r}") from None
    return cast(Event, _required(parsed, ("id", "kind"), "event"))


def _unreachable(connection: Connection, error: httpx.TransportError) -> UnreachableError:
    import httpx

    if isinstance(error, httpx.TimeoutException):
        why = "no answer in time"
    elif isinstance(error, httpx.ConnectError):
        why = "connection failed"
    else:
        why = "the connection broke"
    detail = str(error) or type(error).__name__
    source = connection.server_source
    origin = "the default" if source == "default" else f"from {source}"
    return UnreachableError(
        f"cannot reach the server at {connection.server} ({origin}): {why} ({detail}); is "
        "`toposched serve` running there? (--server, TOPOSCHED_SERVER or the config file "
        "choose another)"
    )


def _error_from(response: httpx.Response) -> ServerError:
    """The ServerError for a 4xx/5xx answer: the error document's fields when it has one,
    else the status and the first line of the body."""
    status = response.status_code
    try:
        document = response.json()
    except ValueError:
        document = None
    error = document.get("error") if isinstance(document, Mapping) else None
    if isinstance(error, Mapping) and isinstance(error.get("message"), str):
        return ServerError(
            status,
            str(error.get("code", response.reason_phrase)),
            error["message"],
            _optional_text(error.get("field")),
            _optional_text(error.get("value")),
            _optional_text(error.get("rule")),
        )
    first_line = response.text.strip().splitlines()[0][:200] if response.text.strip() else ""
    return ServerError(status, response.reason_phrase or "error", first_line or "(no body)")


def _optional_text(value: object) -> str | None:
    return None if value is None else str(value)
