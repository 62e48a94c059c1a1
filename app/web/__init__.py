"""The HTTP face of the server: app factory, JSON API, pages, websockets, rendering, security."""
