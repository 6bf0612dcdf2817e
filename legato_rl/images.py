"""Screenshots as they travel: the PNG bytes a worker encoded, their sha256, and the data URL sent.

A chat request carries each image as a ``data:image/png;base64,...`` URL: that is the wire format of
OpenAI-compatible servers. Inside legato a screenshot's PNG bytes are made once (by the vector env's worker,
``DesktopVectorEnv(png=True)``, or by the harness when it resizes) and base64-encoded once, for the wire.
:class:`PngDataURL` is that URL, a ``str`` (so a message holding it is plain JSON to every consumer), that
also keeps the bytes it was made from and hashes them once: the record store files those bytes under their
sha256 as they are, instead of decoding the URL it was handed back::

    url = PngDataURL(png)          # info["screenshot_png"] of a DesktopVectorEnv(png=True)
    url.startswith(PNG_DATA_URL)   # True: it is the data URL
    url.png is png, url.sha256     # the same bytes, and their sha256 (computed on first use)

Any other string (a data URL built elsewhere, read from JSON) is still a valid image URL; the store then
decodes it to find the bytes.
"""

from __future__ import annotations

import base64
import hashlib

__all__ = ["PNG_DATA_URL", "PngDataURL"]

#: The prefix of a PNG data URL: what an image URL of a chat message starts with.
PNG_DATA_URL = "data:image/png;base64,"


class PngDataURL(str):
    """A ``data:image/png;base64,...`` URL that keeps the PNG bytes it encodes.

    It compares, hashes and serializes (``json``, ``orjson``) as the plain URL string. String operations
    return plain ``str``; only the object made here carries the bytes.

    Args:
        png: the PNG file's bytes.
        sha256: their sha256 hex digest, when the caller already has it (a file read back from the store,
            checked against its name); it is not checked again. By default computed on first use.

    Attributes:
        png: the PNG bytes, as given (a ``bytes`` object is not copied).

    Example:
        >>> from legato_gym.png import encode_png
        >>> import numpy as np
        >>> url = PngDataURL(encode_png(np.zeros((2, 2, 3), np.uint8)))
        >>> url.startswith(PNG_DATA_URL), len(url.sha256)
        (True, 64)
    """

    __slots__ = ("_sha256", "png")

    png: bytes
    _sha256: str | None

    def __new__(cls, png: bytes, *, sha256: str | None = None) -> PngDataURL:
        url = super().__new__(cls, PNG_DATA_URL + base64.b64encode(png).decode("ascii"))
        url.png = png if type(png) is bytes else bytes(png)  # a bytearray could change under the URL
        url._sha256 = sha256
        return url

    @property
    def sha256(self) -> str:
        """The sha256 hex digest of :attr:`png` (hashed once, on first use)."""
        if self._sha256 is None:
            self._sha256 = hashlib.sha256(self.png).hexdigest()
        return self._sha256

    def __reduce__(self) -> tuple[type[PngDataURL], tuple[bytes]]:
        return (PngDataURL, (self.png,))

    def __repr__(self) -> str:
        return f"PngDataURL(<{len(self.png)} bytes of PNG>)"
