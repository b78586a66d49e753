-- What clients attach to a task besides its content: who works on it, and a
-- JSON object of their own (an agent's activeForm, a description). NULL: none.
ALTER TABLE tasks ADD COLUMN owner TEXT;
ALTER TABLE tasks ADD COLUMN metadata TEXT CHECK (metadata IS NULL OR json_type(metadata) = 'object');
