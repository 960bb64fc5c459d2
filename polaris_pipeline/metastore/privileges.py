"""The grants and row-level-security policy of the pipeline's PostgreSQL role.

The role reads every entity (the guards judge them all) but writes TASK rows only
(``predicates.task_rows``), and reads and inserts ``events`` where it exists.
``polaris-pipeline grant-role ROLE`` prints the script (docs/operator-guide.md section 2).
"""

from __future__ import annotations

import re

from polaris_pipeline.metastore.predicates import task_rows
from polaris_pipeline.metastore.schema import POLARIS_SCHEMA

ENTITIES = f"{POLARIS_SCHEMA}.entities"
# A plain identifier, short enough that "<role>_update_tasks" stays within
# PostgreSQL's 63 bytes (a longer policy name would be cut, and two could collide).
_ROLE = re.compile(r"[a-z_][a-z0-9_]{0,46}")


def require_role_name(role: str) -> str:
    """``role`` when it is a plain lower-case identifier of at most 47 characters."""
    if not _ROLE.fullmatch(role):
        raise ValueError(
            f"role name {role!r}: a lower-case letter or _ first, then lower-case letters, "
            "digits or _, at most 47 characters in all"
        )
    return role


def _refuse_hidden_roles(role: str) -> str:
    # Row-level security hides every row from a role with no policy: refuse, naming
    # them, when a role other than the owner, a superuser, one that bypasses it or
    # ``role`` has privileges on entities and no policy of its own (Polaris's server
    # connecting as a non-owner role, say).
    return f"""DO $$
DECLARE hidden TEXT;
BEGIN
    SELECT string_agg(DISTINCT r.rolname, ', ' ORDER BY r.rolname) INTO hidden
    FROM pg_class c
    CROSS JOIN LATERAL aclexplode(c.relacl) AS a
    JOIN pg_roles r ON r.oid = a.grantee
    WHERE c.oid = '{ENTITIES}'::regclass
      AND a.grantee <> c.relowner AND r.rolname <> '{role}'
      AND NOT r.rolsuper AND NOT r.rolbypassrls
      AND NOT EXISTS (SELECT 1 FROM pg_policies p
          WHERE p.schemaname = '{POLARIS_SCHEMA}' AND p.tablename = 'entities'
            AND r.rolname = ANY (p.roles));
    IF hidden IS NOT NULL THEN
        RAISE EXCEPTION 'row-level security on {ENTITIES} would hide every row from %: '
            'give each a policy, or BYPASSRLS, first (docs/operator-guide.md section 2)',
            hidden;
    END IF;
END $$;"""


def role_script(role: str) -> str:
    """The SQL that gives ``role`` exactly what the pipeline needs, in one transaction;
    run it as the owner of ``polaris_schema`` (or a superuser). Running it again
    replaces the policies."""
    require_role_name(role)
    task = task_rows(None)
    who = f'"{role}"'
    lines = [
        "BEGIN;",
        f"GRANT USAGE ON SCHEMA {POLARIS_SCHEMA} TO {who};",
        f"GRANT SELECT, INSERT, UPDATE, DELETE ON {ENTITIES} TO {who};",
        f"GRANT SELECT ON {POLARIS_SCHEMA}.version TO {who};",
        # Task events (metastore/events.py), where the schema has the table (v3+).
        "DO $$ BEGIN",
        f"    IF to_regclass('{POLARIS_SCHEMA}.events') IS NOT NULL THEN",
        # SELECT: the leak report names who dropped a table from the drop events.
        f"        GRANT SELECT, INSERT ON {POLARIS_SCHEMA}.events TO {who};",
        "    END IF;",
        "END $$;",
        _refuse_hidden_roles(role),
        f"ALTER TABLE {ENTITIES} ENABLE ROW LEVEL SECURITY;",
    ]
    rules = {
        "SELECT": "USING (true)",
        "INSERT": f"WITH CHECK ({task})",
        "UPDATE": f"USING ({task}) WITH CHECK ({task})",
        "DELETE": f"USING ({task})",
    }
    for command, rule in rules.items():
        target = "entities" if command == "SELECT" else "tasks"
        name = f'"{role}_{command.lower()}_{target}"'
        lines.append(f"DROP POLICY IF EXISTS {name} ON {ENTITIES};")
        lines.append(f"CREATE POLICY {name} ON {ENTITIES} FOR {command} TO {who} {rule};")
    lines.append("COMMIT;")
    return "\n".join(lines) + "\n"
