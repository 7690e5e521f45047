"""Text lines rendered with a CJK font at run time, the input a recognizer needs, and its CTC decoding.

The data is made, never downloaded: random strings over a small charset (digits and a few
CJK characters by default), each drawn with Pillow in a font from a Debian package
(fonts-wqy-microhei, which `make setup` installs), at a random size, offset, ink and noise.
Every line's look depends only on (seed, index), so every rank and every resume renders the
same images.

Layout of a line (what the model takes, what a client sends):
- float32 (1, HEIGHT, width): 1.0 is ink, 0.0 is background, width in pixels as rendered
  (a multiple of WIDTH_STEP);
- a batch of lines is (N, 1, HEIGHT, W): every line right-padded with background (0.0) to the
  widest, W rounded up to WIDTH_STEP (`to_batch`). The recognizer is trained on such padding,
  so a padded line reads as the line alone.

Decoding (`ctc_greedy_decode`) needs only numpy: a client of the served model imports this
module (or copies the ten lines) without Paddle.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from functools import lru_cache
from pathlib import Path

import numpy as np

HEIGHT = 32
# The recognizer's time step covers 4 pixel columns (two 2x2 poolings); widths are padded to it.
WIDTH_STEP = 4
BLANK = 0  # CTC's blank is class 0; charset[i] is class i + 1
DEFAULT_CHARSET = "0123456789年月日元"
FONT_PACKAGE = "fonts-wqy-microhei"
# Where Debian's CJK font packages put their fonts, the package of each (for the error message).
FONT_CANDIDATES = (
    ("/usr/share/fonts/truetype/wqy/wqy-microhei.ttc", "fonts-wqy-microhei"),
    ("/usr/share/fonts/truetype/wqy/wqy-zenhei.ttc", "fonts-wqy-zenhei"),
    ("/usr/share/fonts/opentype/noto/NotoSansCJK-Regular.ttc", "fonts-noto-cjk"),
)
_FONT_SIZES = (18, 23)  # drawn per line, upper bound excluded


class FontMissing(RuntimeError):
    """No CJK font to render with: the message names the Debian package to install."""


def find_font(path: str | None = None) -> str:
    """The font file to render with: `path` when given (it must exist), else the first CJK font
    of FONT_CANDIDATES installed here."""
    if path:
        if not Path(path).is_file():
            raise FontMissing(f"config.font: {path} is not a file (a .ttf/.ttc font with the charset's glyphs)")
        return path
    for candidate, _package in FONT_CANDIDATES:
        if Path(candidate).is_file():
            return candidate
    looked = ", ".join(c for c, _ in FONT_CANDIDATES)
    raise FontMissing(
        f"no CJK font to render text lines with (looked for {looked}): install the Debian package "
        f"{FONT_PACKAGE} (`apt-get install -y {FONT_PACKAGE}`; `make setup` installs it), or set config.font "
        "to a .ttf/.ttc file that has the charset's glyphs"
    )


def check_charset(charset: object) -> str:
    if not isinstance(charset, str) or not charset:
        raise ValueError(f"config.charset: must be a non-empty string of distinct characters, got {charset!r}")
    if len(set(charset)) != len(charset):
        raise ValueError(f"config.charset: characters must be distinct, got {charset!r}")
    if any(c.isspace() for c in charset):
        raise ValueError("config.charset: must not contain whitespace (a blank column is CTC's blank)")
    return charset


@lru_cache(maxsize=32)
def _font(path: str, size: int):
    from PIL import ImageFont

    return ImageFont.truetype(path, size)


def render(text: str, font_path: str, rng: np.random.Generator) -> np.ndarray:
    """One line as float32 (1, HEIGHT, width): random size, offsets, ink and noise from rng."""
    from PIL import Image, ImageDraw

    font = _font(font_path, int(rng.integers(*_FONT_SIZES)))
    left, top, right, bottom = font.getbbox(text)
    x0 = int(rng.integers(1, 6))
    width = right - left + x0 + int(rng.integers(1, 6))
    width = -(-width // WIDTH_STEP) * WIDTH_STEP
    image = Image.new("L", (width, HEIGHT), 255)
    y0 = (HEIGHT - (bottom - top)) // 2 - top + int(rng.integers(-2, 3))
    ImageDraw.Draw(image).text((x0 - left, y0), text, font=font, fill=int(rng.integers(0, 60)))
    line = 1.0 - np.asarray(image, dtype=np.float32) / 255.0
    line += rng.normal(0.0, 0.05, line.shape).astype(np.float32)
    return np.clip(line, 0.0, 1.0)[None]


def random_texts(count: int, charset: str, seed: Sequence[int], min_chars: int = 2, max_chars: int = 6,
                 exclude: Iterable[str] = ()) -> list[str]:
    """`count` distinct random strings of min_chars..max_chars characters, none in `exclude`,
    drawn by a generator seeded with `seed` (a sequence of ints: one stream per purpose)."""
    if min_chars < 1 or max_chars < min_chars:
        raise ValueError(f"need 1 <= min_chars <= max_chars, got {min_chars}..{max_chars}")
    taken = set(exclude)
    rng = np.random.default_rng([*seed])
    chars = list(charset)
    texts: list[str] = []
    for _attempt in range(count * 50):
        if len(texts) == count:
            break
        text = "".join(rng.choice(chars, int(rng.integers(min_chars, max_chars + 1))))
        if text not in taken:
            taken.add(text)
            texts.append(text)
    if len(texts) < count:
        raise ValueError(f"cannot draw {count} distinct lines of {min_chars}..{max_chars} characters from {charset!r}")
    return texts


def render_lines(texts: Sequence[str], font_path: str, seed: Sequence[int]) -> list[np.ndarray]:
    """Each text rendered with a generator seeded by (*seed, index): the same images everywhere."""
    return [render(text, font_path, np.random.default_rng([*seed, index])) for index, text in enumerate(texts)]


def to_batch(lines: Sequence[np.ndarray], width: int = 0) -> np.ndarray:
    """(N, 1, HEIGHT, W) float32: the lines right-padded with background to the widest (or to
    `width` when larger), W rounded up to WIDTH_STEP."""
    widest = max([line.shape[-1] for line in lines] + [width])
    widest = -(-widest // WIDTH_STEP) * WIDTH_STEP
    batch = np.zeros((len(lines), 1, HEIGHT, widest), dtype=np.float32)
    for i, line in enumerate(lines):
        batch[i, :, :, : line.shape[-1]] = line
    return batch


def encode(texts: Sequence[str], charset: str) -> tuple[np.ndarray, np.ndarray]:
    """CTC targets: (labels int32 (N, longest) zero-padded, lengths int64 (N,))."""
    index = {c: i + 1 for i, c in enumerate(charset)}
    longest = max(len(t) for t in texts)
    labels = np.zeros((len(texts), longest), dtype=np.int32)
    for row, text in enumerate(texts):
        labels[row, : len(text)] = [index[c] for c in text]
    return labels, np.asarray([len(t) for t in texts], dtype=np.int64)


def ctc_greedy_decode(probs: np.ndarray, charset: str) -> list[str]:
    """Best path: the most likely class at each time step of (N, T, classes), repeats collapsed,
    blanks dropped, class i + 1 read as charset[i]."""
    best = np.asarray(probs).argmax(axis=-1)
    texts = []
    for path in best:
        keep = path != BLANK
        keep[1:] &= path[1:] != path[:-1]
        texts.append("".join(charset[i - 1] for i in path[keep]))
    return texts


def edit_distance(a: str, b: str) -> int:
    """Levenshtein distance (insertions, deletions, substitutions): the character error count."""
    previous = list(range(len(b) + 1))
    for i, ca in enumerate(a, 1):
        current = [i]
        for j, cb in enumerate(b, 1):
            current.append(min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + (ca != cb)))
        previous = current
    return previous[-1]
