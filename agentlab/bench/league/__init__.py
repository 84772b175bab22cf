"""The league: many arms of one benchmark against one baseline, its stored rows and its table."""
