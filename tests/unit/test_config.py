"""Configuration: one validated place; every error names the field and what is allowed."""

import textwrap

import pytest

from llmwatch.agent.components import load_config
from llmwatch.core.config import ConfigError


def write(tmp_path, text):
    path = tmp_path / "llmwatch.yaml"
    path.write_text(textwrap.dedent(text))
    return path


def test_defaults_need_no_file():
    cfg = load_config(None, environ={})
    assert cfg.sampling.rate == 0.1
    assert cfg.redaction.enabled is True
    assert cfg.queue.max_size == 10_000


def test_file_values_are_read(tmp_path):
    cfg = load_config(
        write(
            tmp_path,
            """
        upstream: http://127.0.0.1:8000/
        sampling:
          rate: 0.25
          overrides:
            - route: /v1/embeddings
              rate: 0.0
        metrics:
          pricing:
            my-model: {input_per_million: 1.0, output_per_million: 2.0}
    """,
        ),
        environ={},
    )
    assert cfg.upstream == "http://127.0.0.1:8000"
    assert cfg.sampling.rate == 0.25
    assert cfg.sampling.overrides[0].route == "/v1/embeddings"
    assert cfg.metrics.pricing["my-model"].output_per_million == 2.0


def test_environment_overrides_file(tmp_path):
    path = write(tmp_path, "sampling: {rate: 0.25}\n")
    cfg = load_config(path, environ={"LLMWATCH_SAMPLING__RATE": "0.5", "LLMWATCH_REDACTION__ENABLED": "false"})
    assert cfg.sampling.rate == 0.5
    assert cfg.redaction.enabled is False


def test_command_line_overrides_environment():
    cfg = load_config(None, overrides={"listen": "127.0.0.1:9999"}, environ={"LLMWATCH_LISTEN": "127.0.0.1:1111"})
    assert cfg.listen == "127.0.0.1:9999"


def test_out_of_range_value_names_field_and_bound(tmp_path):
    with pytest.raises(ConfigError) as err:
        load_config(write(tmp_path, "sampling: {rate: 1.5}\n"), environ={})
    message = str(err.value)
    assert "sampling.rate" in message
    assert "less than or equal to 1" in message
    assert "1.5" in message


def test_unknown_field_lists_allowed_fields(tmp_path):
    with pytest.raises(ConfigError) as err:
        load_config(write(tmp_path, "sampling: {sample_rate: 0.2}\n"), environ={})
    message = str(err.value)
    assert "sampling.sample_rate: unknown field" in message
    assert "rate" in message and "keep_errors" in message


def test_wrong_choice_lists_allowed_values(tmp_path):
    with pytest.raises(ConfigError) as err:
        load_config(write(tmp_path, "logging: {format: xml}\n"), environ={})
    assert "logging.format" in str(err.value)
    assert "'json' or 'console'" in str(err.value)


def test_bad_value_from_environment_names_the_variable():
    with pytest.raises(ConfigError) as err:
        load_config(None, environ={"LLMWATCH_QUEUE__MAX_SIZE": "lots"})
    assert "queue.max_size" in str(err.value)
    assert "LLMWATCH_QUEUE__MAX_SIZE" in str(err.value)


def test_invalid_yaml_reports_line(tmp_path):
    with pytest.raises(ConfigError) as err:
        load_config(write(tmp_path, "sampling:\n  rate: [0.1\n"), environ={})
    assert "not valid YAML" in str(err.value)
    assert "line" in str(err.value)


def test_missing_file_is_a_clear_error(tmp_path):
    with pytest.raises(ConfigError, match="does not exist"):
        load_config(tmp_path / "nope.yaml", environ={})


def test_top_level_must_be_a_mapping(tmp_path):
    with pytest.raises(ConfigError, match="must be a mapping"):
        load_config(write(tmp_path, "- a\n- b\n"), environ={})


def test_bad_listen_address_says_expected_form():
    with pytest.raises(ConfigError, match="HOST:PORT"):
        load_config(None, overrides={"listen": "localhost"}, environ={})


def test_bad_upstream_url_is_refused():
    with pytest.raises(ConfigError, match="http"):
        load_config(None, overrides={"upstream": "ftp://x"}, environ={})


def test_invalid_redaction_regex_names_the_pattern(tmp_path):
    with pytest.raises(ConfigError) as err:
        load_config(write(tmp_path, "redaction: {extra_patterns: ['(unclosed']}\n"), environ={})
    assert "redaction.extra_patterns" in str(err.value)
    assert "(unclosed" in str(err.value)


def test_sampling_override_needs_a_selector(tmp_path):
    with pytest.raises(ConfigError, match="route"):
        load_config(write(tmp_path, "sampling: {overrides: [{rate: 0.5}]}\n"), environ={})


def test_redaction_policy_fields_mode_and_salt_are_read_from_the_file(tmp_path):
    cfg = load_config(
        write(
            tmp_path,
            """\
        redaction:
          mode: scores_only
          fields: {request.user: drop, metadata.conversation_id: hash}
          hash_salt: s3cret
        files: {mode: "0640"}
        """,
        ),
        environ={},
    )
    assert cfg.redaction.mode == "scores_only"
    assert cfg.redaction.fields == {"request.user": "drop", "metadata.conversation_id": "hash"}
    assert cfg.redaction.hash_salt.get_secret_value() == "s3cret" and "s3cret" not in repr(cfg)
    assert cfg.files.mode_bits == 0o640
    assert load_config(None, environ={}).files.mode == "0600", "data files are private by default"


def test_an_unknown_redaction_action_names_the_field_and_the_choices(tmp_path):
    with pytest.raises(ConfigError) as err:
        load_config(write(tmp_path, "redaction: {fields: {request.user: encrypt}}\n"), environ={})
    assert "redaction.fields.request.user" in str(err.value) and "'drop', 'mask' or 'hash'" in str(err.value)


def test_scores_only_with_kafka_scale_out_is_refused():
    with pytest.raises(ConfigError, match="scores_only keeps request and response text on this host"):
        load_config(None, overrides={"redaction": {"mode": "scores_only"}, "kafka": {"enabled": True}}, environ={})


@pytest.mark.parametrize(
    "given, server",
    [
        ("http://127.0.0.1:8000", "http://127.0.0.1:8000"),
        ("http://127.0.0.1:8000/", "http://127.0.0.1:8000"),
        ("http://127.0.0.1:8000/v1", "http://127.0.0.1:8000"),
        ("http://127.0.0.1:8000/v1/", "http://127.0.0.1:8000"),
        ("https://gateway.example/openai/v1", "https://gateway.example/openai"),
        ("https://gateway.example/openai", "https://gateway.example/openai"),
        ("http://127.0.0.1:8000/v1beta", "http://127.0.0.1:8000/v1beta"),
    ],
)
def test_upstream_is_the_server_whether_given_with_its_v1_root_or_not(given, server):
    # Clients send paths that start with /v1/; an upstream ending in /v1 would make them /v1/v1/...
    assert load_config(None, overrides={"upstream": given}, environ={}).upstream == server


def test_regress_resolves_an_endpoint_as_the_proxy_resolves_its_upstream():
    from llmwatch.scorers.evaluation.regress import openai_base_url

    for given in ("http://127.0.0.1:8000", "http://127.0.0.1:8000/v1", "http://127.0.0.1:8000/v1/"):
        assert openai_base_url(given) == load_config(None, overrides={"upstream": given}, environ={}).upstream + "/v1"


def test_bad_flag_value_is_blamed_on_the_flag_and_named_once():
    with pytest.raises(ConfigError) as err:
        load_config(None, overrides={"upstream": "localhost:8000"}, environ={})
    message = str(err.value)
    assert "upstream (command line: --upstream)" in message
    assert message.count("'localhost:8000'") == 1
    assert "defaults and environment" not in message


def test_flag_names_that_differ_from_the_field_are_used():
    with pytest.raises(ConfigError) as err:
        load_config(
            None, overrides={"otel": {"ingest_listen": "nowhere"}}, environ={}, flags={"otel.ingest_listen": "--listen"}
        )
    assert "otel.ingest_listen (command line: --listen)" in str(err.value)


def test_misspelt_section_in_an_environment_variable_names_the_variable(tmp_path):
    # LLMWATCH_SAMPLNG__RATE makes an unknown section `samplng`; with a config file given too,
    # a message without the variable's name sends the reader to a file that has no `samplng`.
    path = write(tmp_path, "sampling: {rate: 0.25}\n")
    with pytest.raises(ConfigError) as err:
        load_config(path, environ={"LLMWATCH_SAMPLNG__RATE": "0.2"})
    message = str(err.value)
    assert "samplng" in message and "unknown field" in message
    assert "LLMWATCH_SAMPLNG__RATE" in message


def test_a_file_given_as_the_data_directory_is_refused_naming_the_flag(tmp_path):
    # `proxy --data-dir afile` said only "[Errno 20] Not a directory: 'afile/samples'".
    afile = tmp_path / "afile"
    afile.write_text("")
    with pytest.raises(ConfigError) as err:
        load_config(None, overrides={"data_dir": str(afile)}, environ={})
    message = str(err.value)
    assert "data_dir (command line: --data-dir)" in message
    assert "is a file, not a folder" in message and str(afile) in message
    # A folder that is not there yet is fine: it is created when the first file is written.
    assert load_config(None, overrides={"data_dir": str(tmp_path / "new")}, environ={}).data_dir == tmp_path / "new"


def test_an_error_in_the_file_names_its_line(tmp_path):
    # It named the file and the field but not the line: in a long config the reader searched.
    path = write(
        tmp_path,
        """\
        # the sidecar's config
        upstream: http://127.0.0.1:8000
        sampling:
          rat: 0.2
          overrides:
            - route: /v1/embeddings
              rate: 2
        """,
    )
    with pytest.raises(ConfigError) as err:
        load_config(path, environ={"LLMWATCH_QUEUE__MAX_SIZE": "lots"})
    lines = str(err.value).splitlines()
    assert (
        "  - line 4: sampling.rat: unknown field; allowed here: keep_errors, overrides, rate, request_id_header, slow_ms"
        in lines
    )
    assert any(line.startswith("  - line 7: sampling.overrides.0.rate: ") for line in lines), lines
    # A value from a variable still names the variable, not a line.
    assert any(
        line.startswith("  - queue.max_size (from environment variable LLMWATCH_QUEUE__MAX_SIZE)") for line in lines
    )


def test_a_field_at_the_wrong_depth_says_where_it_goes(tmp_path):
    # `listen` indented under `proxy:` read "unknown field; allowed here: body_timeout_s, ..." and
    # left the reader to find that the listen address is a top-level field.
    path = write(
        tmp_path,
        """\
        proxy:
          listen: 127.0.0.1:8080
        slow_ms: 900
        sampling:
          enabled: true
        """,
    )
    with pytest.raises(ConfigError) as err:
        load_config(path, environ={})
    lines = str(err.value).splitlines()
    assert any(line.startswith("  - line 2: proxy.listen: unknown field;") for line in lines), lines
    assert any(line.endswith("; a field 'listen' goes at 'listen'") for line in lines), lines
    assert any(line.endswith("; a field 'slow_ms' goes at 'sampling.slow_ms'") for line in lines), lines
    # A name a dozen sections have ('enabled') points nowhere in particular: no hint.
    (enabled,) = [line for line in lines if "sampling.enabled" in line]
    assert "goes at" not in enabled


def test_errors_in_a_file_are_listed_top_to_bottom_then_variables_and_flags(tmp_path):
    # pydantic reports in the order of the model's sections: a bad `proxy:` at line 6 came before
    # `sampling:` at lines 3 and 4, and a reader fixing the file jumped back up.
    path = write(
        tmp_path,
        """\
        upstream: http://127.0.0.1:8000
        sampling:
          rate: 2
          keep_error: true
        proxy:
          listen: 127.0.0.1:8080
        """,
    )
    with pytest.raises(ConfigError) as err:
        load_config(path, environ={"LLMWATCH_QUEUE__MAX_SIZE": "lots"})
    entries = str(err.value).splitlines()[1:]
    assert [e.split(":")[0] for e in entries] == [
        "  - line 3",
        "  - line 4",
        "  - line 6",
        "  - queue.max_size (from environment variable LLMWATCH_QUEUE__MAX_SIZE)",
    ]


def test_a_missing_file_named_by_llmwatch_config_blames_the_variable(tmp_path):
    # It said "pass an existing file to --config or omit it" to someone who passed no --config.
    with pytest.raises(ConfigError) as err:
        load_config(None, environ={"LLMWATCH_CONFIG": str(tmp_path / "nope.yaml")})
    assert "(LLMWATCH_CONFIG)" in str(err.value) and "does not exist" in str(err.value)
    assert "set LLMWATCH_CONFIG to an existing file or unset it" in str(err.value)
    assert "--config" not in str(err.value)


@pytest.mark.parametrize(
    "variable,meant",
    [
        ("LLMWATCH_SAMPLING_RATE", "LLMWATCH_SAMPLING__RATE"),
        ("LLMWATCH_DRIFT__CANARY_ENABLED", "LLMWATCH_DRIFT__CANARY__ENABLED"),
    ],
)
def test_a_variable_with_one_underscore_where_two_go_names_the_variable_meant(variable, meant):
    # Newcomer trial: LLMWATCH_SAMPLING_RATE=1 said "sampling_rate ... unknown field; allowed here:
    # capture, ..." and not that a section and its field are joined by two underscores.
    with pytest.raises(ConfigError) as err:
        load_config(None, environ={variable: "1"})
    message = str(err.value)
    assert f"from environment variable {variable}" in message
    assert f"did you mean {meant}? (sections and fields are joined by two underscores)" in message


def test_a_value_where_a_section_goes_says_a_section_and_its_fields_without_class_names(tmp_path):
    # "Input should be a valid dictionary or instance of SamplingSection (got 1)": a class name the
    # reader never wrote, and no word of what goes there.
    path = write(tmp_path, "sampling: 1\n")
    with pytest.raises(ConfigError) as err:
        load_config(path, environ={})
    message = str(err.value)
    assert "line 1: sampling: expected a section (its fields indented below it, or {field: value}), got 1" in message
    assert "fields here: keep_errors, overrides, rate, request_id_header, slow_ms" in message
    assert "instance of" not in message and "Section" not in message


def test_a_list_from_a_variable_written_as_a_comma_list_says_the_yaml_form_that_works():
    # LLMWATCH_DRIFT__FAIL_ON=behaviour,inputs said "Input should be a valid list (got
    # 'behaviour,inputs')" and not how a variable gives a list.
    with pytest.raises(ConfigError) as err:
        load_config(None, environ={"LLMWATCH_DRIFT__FAIL_ON": "behaviour,inputs"})
    message = str(err.value)
    assert "drift.fail_on (from environment variable LLMWATCH_DRIFT__FAIL_ON)" in message
    assert "a variable gives a list in YAML's flow form: LLMWATCH_DRIFT__FAIL_ON='[behaviour, inputs]'" in message
    with pytest.raises(ConfigError) as err:
        load_config(None, environ={"LLMWATCH_DRIFT__FAIL_ON": "[behaviour, inputs"})
    assert "that is not valid YAML (a list is written [a, b]" in str(err.value)
    config = load_config(None, environ={"LLMWATCH_DRIFT__FAIL_ON": "[behaviour, inputs]"})
    assert list(config.drift.fail_on) == ["behaviour", "inputs"]


def test_a_secret_given_as_a_number_is_its_text_and_never_quoted() -> None:
    # YAML reads `hash_salt: 987654321` as an int; refused as "Input should be a valid string
    # (got 987654321)", the salt itself went to the error. Every secret field takes any scalar as text.
    cfg = load_config(None, overrides={"redaction": {"hash_salt": 987654321}}, environ={})
    assert cfg.redaction.hash_salt is not None
    assert cfg.redaction.hash_salt.get_secret_value() == "987654321"
    assert "987654321" not in repr(cfg.redaction)


@pytest.mark.parametrize("section", ["judge", "kafka", "redaction", "otel"])
def test_a_value_where_a_section_with_a_secret_goes_is_not_quoted(tmp_path, section) -> None:
    # `LLMWATCH_JUDGE=<the key>` (the section's name for the field's) was refused as "expected a
    # section ..., got '<the key>'": the secret in the error. Its type is named instead.
    with pytest.raises(ConfigError) as err:
        load_config(None, environ={f"LLMWATCH_{section.upper()}": "Sk-Secret-0042"})
    message = str(err.value)
    assert f"{section} (from environment variable LLMWATCH_{section.upper()}): expected a section" in message
    assert "got a str (not shown: this section holds a secret)" in message
    assert "Sk-Secret-0042" not in message
    path = write(tmp_path, f"{section}: 987654321\n")
    with pytest.raises(ConfigError) as err:
        load_config(path, environ={})
    assert f"line 1: {section}: expected a section" in str(err.value)
    assert "987654321" not in str(err.value)


def test_header_values_given_as_one_string_are_not_quoted(tmp_path) -> None:
    # OTEL_EXPORTER_OTLP_HEADERS is written "authorization=Bearer <token>": the same string given
    # to otel.headers (or a shadow candidate's headers) was refused with "(got '<the string>')".
    with pytest.raises(ConfigError) as err:
        load_config(None, environ={"LLMWATCH_OTEL__HEADERS": "authorization=Bearer Tok-0042-secret"})
    message = str(err.value)
    assert "otel.headers (from environment variable LLMWATCH_OTEL__HEADERS): expected a mapping" in message
    assert "Tok-0042-secret" not in message
    path = write(
        tmp_path,
        """
        shadow:
          candidates:
            - name: c
              upstream: http://127.0.0.1:1
              headers: "authorization=Bearer Tok-0042-secret"
        """,
    )
    with pytest.raises(ConfigError) as err:
        load_config(path, environ={})
    assert "shadow.candidates.0.headers: expected a mapping" in str(err.value)
    assert "Tok-0042-secret" not in str(err.value)
    # A field beside them still quotes what it was given.
    with pytest.raises(ConfigError) as err:
        load_config(None, environ={"LLMWATCH_OTEL__TIMEOUT_S": "-3"})
    assert (
        "otel.timeout_s (from environment variable LLMWATCH_OTEL__TIMEOUT_S): Input should be greater than 0 (got -3)"
        in str(err.value)
    )
