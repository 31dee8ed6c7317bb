"""The device actor: mailbox and loop (worker), dispatch table, envelope and stream tracking
(context), completion threads, client API, buffers, staging copies, stats and trace hooks."""
