"""The Textual dashboard and the command-line entry point. Only this package imports textual."""
