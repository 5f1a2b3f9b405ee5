-- The query of the URL a pushed request came to (`bodySHA256=…`), without the `?`:
-- a plugin that maps an event by its URL maps it the same when the event is mapped
-- again (a replay with remap, a shadow comparison). NULL for a URL without one, a
-- reconciled event, and receipts stored before this column existed.
ALTER TABLE receipts ADD COLUMN query TEXT;
