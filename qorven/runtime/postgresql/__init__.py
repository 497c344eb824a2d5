"""Django's PostgreSQL backend, as Qorven runs it (DATABASES' ENGINE for a postgres:// URL)."""
