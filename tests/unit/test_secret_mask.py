"""`SecretMask`: known credentials masked by exact value in JSON lines, the line always valid JSON."""

from __future__ import annotations

import base64

import orjson

from llmwatch.core.secrets import SecretMask, header_forms, userinfo_forms


def test_every_form_a_service_may_quote_back_is_known():
    assert header_forms("Bearer tok-12345") == {"Bearer tok-12345", "tok-12345"}
    basic = "Basic " + base64.b64encode(b"svc:pa@ss").decode()
    assert header_forms(basic) >= {basic, basic.split()[1], "svc:pa@ss", "pa@ss"}
    assert userinfo_forms("svc:pa%40ss") == {"svc:pa%40ss", "svc:pa@ss", "pa%40ss", "pa@ss"}
    assert header_forms("Basic not-base64!") == {"Basic not-base64!", "not-base64!"}


def test_a_line_without_a_secret_is_the_same_bytes():
    mask = SecretMask(["tok-12345"])
    line = orjson.dumps({"a": "nothing here", "n": 1.25})
    assert mask.line(line) is line


def test_secrets_are_masked_in_keys_and_values_longest_first():
    mask = SecretMask(["tok-12345", "Bearer tok-12345"])
    doc = {"error": {"message": "bad key Bearer tok-12345 (tok-12345)"}, "tok-12345": [1, "tok-12345x"]}
    out = orjson.loads(mask.line(orjson.dumps(doc)))
    assert out == {"error": {"message": "bad key *** (***)"}, "***": [1, "***x"]}


def test_a_secret_with_characters_json_escapes_is_found_and_the_line_stays_valid():
    secret = 'k"e\\y-\n9876'
    mask = SecretMask([secret])
    out = mask.line(orjson.dumps({"m": f"quoted: {secret}!"}))
    assert orjson.loads(out) == {"m": "quoted: ***!"}


def test_bytes_that_only_look_like_a_secret_inside_an_escape_change_nothing():
    # "\n1234" is written `\n1234` in JSON: the bytes `n1234` appear, the text has none.
    mask = SecretMask(["n1234"])
    line = orjson.dumps({"m": "line\n1234"})
    assert orjson.loads(mask.line(line)) == {"m": "line\n1234"}


def test_short_values_are_not_masked():
    mask = SecretMask(["abc", ""])
    assert not mask
    line = orjson.dumps({"m": "abc"})
    assert mask.line(line) == line


def test_value_masks_inside_any_json_shape_and_returns_the_very_object_when_clean():
    from llmwatch.core.secrets import SecretMask

    mask = SecretMask(["s3cr3t-value"])
    clean = {"choices": [{"message": {"content": "hello"}}], "n": 1}
    assert mask.value(clean) is clean
    assert mask.value(None) is None
    dirty = {"error": {"message": "bad key s3cr3t-value", "list": ["x s3cr3t-value y", 2]}}
    assert mask.value(dirty) == {"error": {"message": "bad key ***", "list": ["x *** y", 2]}}
    assert mask.value("s3cr3t-value!") == "***!"


def test_upstream_secrets_are_the_url_password_in_every_form_the_upstream_may_quote():
    import base64

    from llmwatch.core.secrets import upstream_secrets

    assert not upstream_secrets("http://127.0.0.1:8080/v1")
    assert not upstream_secrets(None)
    mask = upstream_secrets("http://svc:p%40ss-word.1@127.0.0.1:8080/v1")
    token = base64.b64encode(b"svc:p@ss-word.1").decode()
    for quoted in ("p@ss-word.1", "p%40ss-word.1", "svc:p@ss-word.1", token, f"Basic {token}"):
        assert mask.text(f"you sent {quoted}") == "you sent ***", quoted
    assert mask.text("user svc") == "user svc"  # the user name is no secret
