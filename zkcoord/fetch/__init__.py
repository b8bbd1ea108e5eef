"""The consumers' fetchers: how records get from brokers to a consumer."""
