"""The one error vocabulary of every layer: temporary, permanent and config errors."""
