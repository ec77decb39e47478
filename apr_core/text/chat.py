"""placeholder"""
def render_chat(*a, **k):
    raise NotImplementedError
