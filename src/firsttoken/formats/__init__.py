"""The wire formats clients speak to the gateway: OpenAI's chat completions (its own), and Anthropic's
Messages, each read into the chat form the gateway reasons with and written back in its own shape."""
