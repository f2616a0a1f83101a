__version__: str
BUILD_PROFILE: str
