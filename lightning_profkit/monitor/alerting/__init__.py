"""The rolling data-wait checks and their alert rule, the advice an alert carries, and its delivery."""
