"""The installed rlguard distribution's version: it tags the sandbox image and its labels.

Read from the package metadata so the sandbox layer needs nothing from the top-level package.
"""

from importlib.metadata import PackageNotFoundError, version

try:
    RLGUARD_VERSION = version("rlguard")
except PackageNotFoundError:  # running from a source tree that is not installed
    RLGUARD_VERSION = "0.0.0+local"
