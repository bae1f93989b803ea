"""Text from outside made safe to show: control characters escaped, credentials of URLs hidden."""

from lightning_profkit.printable import printable, redact


def test_control_and_invisible_characters_are_shown_as_escapes():
    assert printable("a\x1b]0;t\x07b\x1b[2K\u202ec\nd\x9be") == "a\\x1b]0;t\\x07b\\x1b[2K\\u202ec\\nd\\x9be"
    assert printable("aten::linear (µs) – ü") == "aten::linear (µs) – ü"  # printable text is left as it is


def test_the_user_information_of_every_url_is_hidden():
    text = ("traces -> s3://AKID:SECRET@bucket/run/profiler; cannot reach ftp://alice:pw@host:21/x, "
            "gs://bucket/y and 'az://k@acct/z'")
    assert redact(text) == ("traces -> s3://***@bucket/run/profiler; cannot reach ftp://***@host:21/x, "
                            "gs://bucket/y and 'az://***@acct/z'")
    assert redact("user@host: /tmp/a@b") == "user@host: /tmp/a@b"  # no URL: nothing to hide


def test_secrets_nested_in_storage_options_are_hidden_in_store_errors():
    """A token dict or client_kwargs inside the storage options: their values are hidden in a store's error too,
    the endpoint's URL is not (it says where)."""
    from lightning_profkit import store

    store.use_options({"key": "AKIDTOPLEVEL", "client_kwargs": {"endpoint_url": "http://127.0.0.1:9000",
                                                                 "aws_session_token": "SESSIONTOKEN42"},
                       "token": {"refresh_token": "REFRESH-77", "scopes": ["a"]}})
    try:
        said = store._without_secrets("failed with AKIDTOPLEVEL, SESSIONTOKEN42 and REFRESH-77 at "
                                      "http://127.0.0.1:9000", "s3://bucket/run")
    finally:
        store.use_options({})
    assert said == "failed with ***, *** and *** at http://127.0.0.1:9000"


def test_the_arabic_letter_mark_and_names_that_are_not_utf8():
    from lightning_profkit.printable import name_text

    assert printable("a\u061cb") == "a\\u061cb"  # a bidirectional mark: shown as its escape
    assert name_text(b"\xffx".decode("utf-8", "surrogateescape")) == "\\xffx"
