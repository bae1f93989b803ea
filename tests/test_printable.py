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
