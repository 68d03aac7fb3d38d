"""datakit: the image data people really have, turned into fast, correct PyTorch input."""

from datakit.devices import select_gpus
from datakit.io import ImageDecodeError, decode_image, encode_image, imread, imwrite

__version__ = "0.1.0"

__all__ = [
    "ImageDecodeError",
    "__version__",
    "decode_image",
    "encode_image",
    "imread",
    "imwrite",
    "select_gpus",
]
