"""The bottom layer: errors, numeric limits and helpers that every layer shares (standard
library only)."""
