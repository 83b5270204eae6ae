"""Plan files: versioned JSON of one chosen plan, typed reads and schema migrations."""
