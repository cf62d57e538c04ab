-- Where the box's API processes listen (issue 53); as migrations/sqlite/0010_api_listens.sql.
CREATE TABLE api_listens (
    address TEXT PRIMARY KEY NOT NULL,
    seen_at TEXT NOT NULL
);
