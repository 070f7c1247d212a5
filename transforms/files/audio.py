"""An audio file's header read with soundfile (libsndfile: WAV, FLAC, OGG, MP3, AIFF and the
other formats it lists): the file is kept as it is, its sample rate, channels and duration
become features. A file libsndfile cannot open is a `BadFileError` (a bad row)."""

from __future__ import annotations

import dataclasses
import io

import soundfile

from transforms.files.fetch import BadFileError

__all__ = ["AudioInfo", "audio_info"]

_UNKNOWN_FRAMES = 2**62  # libsndfile's count for a stream whose length the header leaves open


@dataclasses.dataclass(frozen=True)
class AudioInfo:
    """What the header says: samples per second, channels, and seconds (None when the format
    does not say how many frames it holds)."""

    sample_rate: int
    channels: int
    duration: float | None


def audio_info(data: bytes) -> AudioInfo:
    """The header of the audio file in `data`; BadFileError when libsndfile cannot open it."""
    try:
        info = soundfile.info(io.BytesIO(data))
    except (soundfile.LibsndfileError, RuntimeError, TypeError, ValueError) as err:
        message = getattr(err, "error_string", None) or str(err)
        raise BadFileError(f"not an audio file libsndfile can read ({message})") from None
    frames = int(info.frames)
    known = 0 <= frames < _UNKNOWN_FRAMES and info.samplerate > 0
    duration = frames / info.samplerate if known else None
    return AudioInfo(int(info.samplerate), int(info.channels), duration)
