"""IR -> checked IR: every semantic rule of the language, every violation reported at once."""
