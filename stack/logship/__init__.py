"""Log shipping (issue #26, docs/log-shipping.md): every component's log file is read by a
real shipper from Debian's archive (rsyslog: imfile in, a bounded disk-assisted queue, RELP
out, impstats for its own counters) and sent to a log store with its own ledger.

- ``store``: the fake log store (RELP receiver, SQLite ledger at 0600, token-protected read API);
- ``rsyslog``: the shipper's configuration (redaction rules, queue bounds) and its process;
- ``stats``: the shipper's impstats counters as queued / shipped / dropped.
"""
