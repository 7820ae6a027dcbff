"""The code `launch.export` writes beside an export's weights for the heads HuggingFace transformers has no class for
(remote code: config.json's `auto_map` names these classes, `from_pretrained(dir, trust_remote_code=True)` runs them).

The files are copied as they are: they import only torch and transformers (never this package), so an export runs
wherever transformers does. Nothing in this package imports them; tests load them to check them against ours.
"""

import pathlib

FILES = ("configuration_encoderlab.py", "modeling_encoderlab.py", "pipeline_encoderlab.py")  # Copied into exports.


def sources() -> dict[str, str]:
  """{file name: its text} of FILES."""
  here = pathlib.Path(__file__).parent
  return {name: (here / name).read_text(encoding="utf-8") for name in FILES}
