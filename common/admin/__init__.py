"""The admin kit both apps' admins build on: reason-taking actions, page helpers, paging.

Registers no model; each app's ``admin`` package does that.
"""
