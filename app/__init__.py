"""The Socratic server: sessions, steering, agents, pages and the JSON API."""
