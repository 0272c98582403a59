"""Websocket routes. Apps with consumers add their patterns here."""

websocket_urlpatterns = []
