"""The fault proxy follows what a PostgreSQL client sends, message by message, to tell when a COMMIT goes by: the bytes
asyncpg sends for a transaction (captured from a real session), however they are split on the way."""

from __future__ import annotations

from allot_testing.tcp_proxy import FrontendMessages


def message(kind: bytes, body: bytes) -> bytes:
    """A message as a client sends it: its type byte (none before the startup packet), length and body."""
    return kind + (4 + len(body)).to_bytes(4, "big") + body


SSL_REQUEST = b"\x00\x00\x00\x08\x04\xd2\x16/"
STARTUP = message(b"", b"\x00\x03\x00\x00user\x00postgres\x00database\x00x\x00\x00")
BEGIN = b"Q\x00\x00\x00\x0bBEGIN;\x00"
PARSE_DESCRIBE_FLUSH = (
    b"P\x00\x00\x00(__asyncpg_stmt_1__\x00SELECT $1::int\x00\x00\x00"
    b"D\x00\x00\x00\x18S__asyncpg_stmt_1__\x00H\x00\x00\x00\x04"
)
COMMIT = b"Q\x00\x00\x00\x0cCOMMIT;\x00"
# a large message holding the bytes of a COMMIT (a COPY row, say): passed over, not taken for one
COPY_DATA = message(b"d", b"x" * 200 + COMMIT)


def commits(chunks: list[bytes], *, server: bytes = b"N") -> int:
    frontend = FrontendMessages()
    found = 0
    for chunk in chunks:
        found += frontend.feed(chunk)
        if chunk == SSL_REQUEST:
            frontend.server_said(server)
    return found


def test_the_commit_of_a_transaction_is_found_once_however_the_bytes_are_split() -> None:
    session = [SSL_REQUEST, STARTUP, BEGIN, PARSE_DESCRIBE_FLUSH, COPY_DATA, COMMIT, BEGIN]
    assert commits(session) == 1
    assert commits([SSL_REQUEST, b"".join(session[1:])]) == 1
    whole = b"".join(session[1:])
    assert commits([SSL_REQUEST, *(whole[i : i + 1] for i in range(len(whole)))]) == 1


def test_only_a_commit_counts() -> None:
    assert commits([STARTUP, BEGIN, PARSE_DESCRIBE_FLUSH, message(b"Q", b"SELECT 1;\x00")]) == 0
    assert commits([STARTUP, message(b"Q", b" commit \x00")]) == 1  # as PostgreSQL reads it


def test_a_connection_the_server_agreed_to_encrypt_is_not_looked_into() -> None:
    assert commits([SSL_REQUEST, STARTUP, COMMIT], server=b"S") == 0
