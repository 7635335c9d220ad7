"""What hermes-nb needs from the operating system, defined once: where state lives and where keys come from
(``home``), loopback ports (``net``), spawning and ending process groups (``processes``), and reading log files
(``logtail``)."""
