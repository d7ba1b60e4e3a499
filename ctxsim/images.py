"""Images in chat messages: how a message shows one in its text, and what one costs.

Two APIs' prices: OpenAI's (below) for the chat and Responses forms, Anthropic's
(:func:`anthropic_image_tokens`) for the Messages form.

A user message of OpenAI's Chat Completions form may hold image parts
(``{"type": "image_url", "image_url": {"url": ..., "detail": "auto"|"low"|"high"}}``).
ctxsim reads such a message as its text with the line :data:`IMAGE_LINE` where each
image was, and counts each image at what the API bills for it
(:func:`image_url_tokens`) on top of the text: the unit's ``attachment_tokens``
(:class:`~ctxsim.model.ContextUnit`). A break that keeps the message unchanged keeps its
images; one that rewrites, summarizes or removes it drops them (a rewritten text still
says ``[image]`` where one was).

The cost is OpenAI's documented rule for GPT-4o, its first tile-priced vision model
(https://platform.openai.com/docs/guides/images-vision, "Calculating costs"; models
priced per tile with other numbers, or per 32-pixel patch, count otherwise): detail
``low`` costs :data:`LOW_DETAIL_TOKENS`; otherwise the image is scaled
to fit in 2,048 × 2,048, then so that its shorter side is 768 pixels (as the rule is
written: a smaller image is counted as scaled up, the larger count), and it costs
:data:`TILE_TOKENS` per 512-pixel tile plus :data:`LOW_DETAIL_TOKENS`. ``auto``
is priced as ``high`` (the model may choose either: the larger is the safe count). The
size is read from the header of a ``data:`` URL (PNG, GIF, JPEG, WebP); an image behind
a web address, or one whose header is not read, is priced as a 1,024 × 1,024 image
(:data:`UNKNOWN_SIZE`: 765 tokens at ``high``).
"""

from __future__ import annotations

import base64
import binascii
import math
import struct
from pathlib import Path
from typing import Any

from .errors import TranscriptError, describe_value

#: the line a message's text holds where an image was
IMAGE_LINE = "[image]"
LOW_DETAIL_TOKENS = 85
TILE_TOKENS = 170
TILE = 512
#: the size an image is priced at when its own is not known
UNKNOWN_SIZE = (1024, 1024)
DETAILS = ("auto", "low", "high")
#: base64 characters decoded to find an image's size: its header comes first (a JPEG's
#: frame header follows its metadata, which can be long)
_HEADER_CHARS = 1 << 18


def tile_tokens(width: int, height: int, detail: str = "high") -> int:
    """What an image of ``width`` × ``height`` pixels costs at ``detail`` (module docstring)."""
    if detail == "low":
        return LOW_DETAIL_TOKENS
    scale = min(1.0, 2048 / max(width, height))
    width, height = width * scale, height * scale
    scale = 768 / min(width, height)
    width, height = width * scale, height * scale
    tiles = math.ceil(width / TILE - 1e-9) * math.ceil(height / TILE - 1e-9)  # a side of 1,024.0000001 is 2 tiles
    return LOW_DETAIL_TOKENS + TILE_TOKENS * tiles


def image_url_tokens(part: dict[str, Any], at: str, source: Path | str) -> int:
    """The tokens of one ``image_url`` content part (module docstring); TranscriptError
    naming ``at`` for a part without a URL or with an unknown ``detail``."""
    image = part.get("image_url")
    url = image.get("url") if isinstance(image, dict) else None
    if not isinstance(url, str) or not url:
        raise TranscriptError(f"{at}: 'image_url' must be an object with a 'url' string, got {describe_value(image)}",
                              source=source)
    detail = image.get("detail", "auto")
    if detail not in DETAILS:
        raise TranscriptError(f"{at}: 'image_url.detail' must be one of {list(DETAILS)}, got {describe_value(detail)}",
                              source=source)
    return tile_tokens(*(image_size(url) or UNKNOWN_SIZE), detail)


def image_size(url: str) -> tuple[int, int] | None:
    """(width, height) of the image a base64 ``data:`` URL holds, read from its header
    (PNG, GIF, JPEG, WebP); None for any other URL or a header not read."""
    if not url.startswith("data:"):
        return None
    head, comma, payload = url.partition(",")
    if not comma or not head.endswith(";base64"):
        return None
    return base64_size(payload)


def base64_size(payload: str) -> tuple[int, int] | None:
    """(width, height) of a base64-encoded image, read from its header; None when not read."""
    chunk = payload[:_HEADER_CHARS]
    try:
        data = base64.b64decode(chunk[: len(chunk) - len(chunk) % 4])
    except (binascii.Error, ValueError):
        return None
    size = _header_size(data)
    return size if size and size[0] > 0 and size[1] > 0 else None


#: Anthropic's limits on an image before it is priced: its long edge and its tokens
ANTHROPIC_LONG_EDGE = 1568
ANTHROPIC_MAX_TOKENS = 1600
ANTHROPIC_PIXELS_PER_TOKEN = 750


def anthropic_image_tokens(width: int | None = None, height: int | None = None) -> int:
    """What an image costs on Anthropic's Messages API (https://docs.anthropic.com/en/docs/build-with-claude/vision,
    "Calculate image costs"): width × height / 750 tokens, once an image whose long edge
    is over 1,568 pixels, or that would cost over about 1,600 tokens, is scaled down
    (aspect kept) within both. An image whose size is not known costs the most, 1,600."""
    if not width or not height:
        return ANTHROPIC_MAX_TOKENS
    scale = min(1.0, ANTHROPIC_LONG_EDGE / max(width, height))
    pixels = width * height * scale * scale
    return min(math.ceil(pixels / ANTHROPIC_PIXELS_PER_TOKEN - 1e-9), ANTHROPIC_MAX_TOKENS)


def anthropic_block_tokens(block: dict[str, Any], at: str, source: Path | str) -> int:
    """The tokens of one ``image`` block of the Messages API (its ``source`` base64 data,
    a URL or a file id; the size read from base64 data); TranscriptError naming ``at`` for
    a block without a source the API takes."""
    given = block.get("source")
    kind = given.get("type") if isinstance(given, dict) else None
    needs = {"base64": "data", "url": "url", "file": "file_id"}.get(kind)
    if needs is None or not isinstance(given.get(needs), str) or not given[needs]:
        raise TranscriptError(f"{at}: an image needs a 'source' of type base64 (with 'data'), url (with 'url') or "
                              f"file (with 'file_id'), got {describe_value(given)}", source=source)
    return anthropic_image_tokens(*(base64_size(given["data"]) or ())) if kind == "base64" else anthropic_image_tokens()


def _header_size(data: bytes) -> tuple[int, int] | None:
    if data[:8] == b"\x89PNG\r\n\x1a\n" and data[12:16] == b"IHDR":
        return struct.unpack(">II", data[16:24])
    if data[:6] in (b"GIF87a", b"GIF89a") and len(data) >= 10:
        return struct.unpack("<HH", data[6:10])
    if data[:2] == b"\xff\xd8":
        return _jpeg_size(data)
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return _webp_size(data)
    return None


def _jpeg_size(data: bytes) -> tuple[int, int] | None:
    """The size in a JPEG's start-of-frame header (SOF0-SOF15 but DHT, JPG and DAC),
    found by walking the segments from the start."""
    i = 2
    while i + 9 <= len(data):
        if data[i] != 0xFF:
            return None
        marker = data[i + 1]
        if marker == 0xFF:  # fill byte
            i += 1
            continue
        if marker in (0x01, *range(0xD0, 0xD8)):  # markers without a length
            i += 2
            continue
        length = struct.unpack(">H", data[i + 2 : i + 4])[0]
        if 0xC0 <= marker <= 0xCF and marker not in (0xC4, 0xC8, 0xCC):
            height, width = struct.unpack(">HH", data[i + 5 : i + 9])
            return width, height
        i += 2 + length
    return None


def _webp_size(data: bytes) -> tuple[int, int] | None:
    kind = data[12:16]
    if kind == b"VP8 " and len(data) >= 30:
        width, height = struct.unpack("<HH", data[26:30])
        return width & 0x3FFF, height & 0x3FFF
    if kind == b"VP8L" and len(data) >= 25:
        bits = int.from_bytes(data[21:25], "little")
        return (bits & 0x3FFF) + 1, ((bits >> 14) & 0x3FFF) + 1
    if kind == b"VP8X" and len(data) >= 30:
        return int.from_bytes(data[24:27], "little") + 1, int.from_bytes(data[27:30], "little") + 1
    return None
