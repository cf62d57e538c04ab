-- Where the box's API processes listen (issue 53): each records its listening address (and, listening on all
-- addresses, each of its machine's) when it starts and every minute after, so that every process's webhook
-- sender, a worker's too, refuses a callback_url into the box's own API. Rows not refreshed for a day go.
CREATE TABLE api_listens (
    address TEXT PRIMARY KEY NOT NULL,
    seen_at TEXT NOT NULL
);
