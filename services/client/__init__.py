"""paddleray.services.client: the code clients (the SDK and the CLI) run on the user's machine."""
