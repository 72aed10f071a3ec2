"""What a client's error tells us about whether its operation happened.

A history is only as sound as these calls: `fail` claims the operation definitely did not
take effect, and the checkers will flag any trace of it as an anomaly. So an error is
`fail` only when librdkafka or the broker could not have applied the request (it never
left the client, or the broker rejects it before appending); every other error, timeouts
first among them, is `info`.
"""
from __future__ import annotations

from confluent_kafka import KafkaError, KafkaException

# Delivery errors after which the record is certainly not in the log: the client never
# sent it, or every broker answer was a rejection that precedes an append.
NOT_PERSISTED = {
    KafkaError._QUEUE_FULL, KafkaError.MSG_SIZE_TOO_LARGE,
    KafkaError.TOPIC_EXCEPTION, KafkaError._UNKNOWN_TOPIC, KafkaError._UNKNOWN_PARTITION,
    KafkaError.TOPIC_AUTHORIZATION_FAILED, KafkaError.RECORD_LIST_TOO_LARGE, KafkaError.INVALID_RECORD,
    KafkaError._INVALID_ARG, KafkaError._STATE,
}


def error_of(exc: BaseException) -> KafkaError | None:
    if isinstance(exc, KafkaException) and exc.args and isinstance(exc.args[0], KafkaError):
        return exc.args[0]
    return None


def describe(err: KafkaError | BaseException | None) -> str:
    if isinstance(err, KafkaError):
        return f"{err.name()}: {err.str()}"
    return f"{type(err).__name__}: {err}"


def send_outcome(errors: list[KafkaError | None], delivered: list[bool]) -> str:
    """One send op carries several records: ok if every record was acknowledged, fail if
    every record was definitely not persisted, info otherwise."""
    if all(delivered):
        return "ok"
    if not any(delivered) and all(e is not None and e.code() in NOT_PERSISTED for e in errors):
        return "fail"
    return "info"


def commit_outcome(err: KafkaError) -> str:
    """A commit_transaction that raised. An abortable error means the coordinator did not
    commit and the application must abort: fail. Anything else (timeout, fencing seen
    after the request left, fatal errors) leaves the outcome unknown: info."""
    return "fail" if err.txn_requires_abort() else "info"
