from gantry_cli.main import app

app(prog_name="gantry")
