"""firsttoken: the LLM gateway at the near end of the journey."""

__version__ = "0.1.0"
