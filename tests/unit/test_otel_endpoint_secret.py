"""A refused otel.endpoint is shown without the credentials in it (as every other URL setting is)."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from llmwatch.collectors.otel.config import OtelSection
from llmwatch.core.errors import describe_validation_error


@pytest.mark.parametrize(
    "protocol,endpoint",
    [("http", "ftp://tracer:hunter2@collector:4318/v1/traces"), ("grpc", "http://tracer:hunter2@collector:4317")],
)
def test_the_refusal_masks_the_password(protocol, endpoint):
    with pytest.raises(ValidationError) as refused:
        OtelSection(protocol=protocol, endpoint=endpoint)
    message = describe_validation_error(refused.value)  # what the config loader prints
    assert message.startswith("field 'endpoint': expected ") and f"(protocol {protocol}" in message
    assert "hunter2" not in message and "***@collector" in message
