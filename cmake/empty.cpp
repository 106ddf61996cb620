// Compiled into a library target whose folder has no sources yet.
